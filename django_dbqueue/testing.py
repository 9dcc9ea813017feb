"""Helpers for your tests: run the queue in the test's process and transaction.

::

    from django_dbqueue.testing import run_queue_until_empty

    class OrderTests(TestCase):
        def test_paid_orders_ship(self):
            Order.objects.create(...)
            stats = run_queue_until_empty(Order)
            self.assertEqual(stats.succeeded, 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .worker import Worker, WorkerStats

if TYPE_CHECKING:
    from .models import QueueMixin


def run_queue_until_empty(
    *models: type[QueueMixin], database: str | None = None, max_jobs: int | None = None
) -> WorkerStats:
    """Run every due row of ``models`` (every queue model if none is named) in this process,
    until none is due; return what the worker did. Inside a ``TestCase`` the worker uses the
    test's transaction and starts no threads; rows whose retry is not due yet stay READY."""
    worker = Worker(
        models=list(models) or None, burst=True, handle_signals=False, database=database, max_jobs=max_jobs
    )
    return worker.run()
