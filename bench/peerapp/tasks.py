"""The no-op job of the ``django.tasks`` peers: it only writes the exactly-once ledger."""

from __future__ import annotations

from django.tasks import task

from bench import ledger


@task
def noop(job_id: int) -> None:
    """The handler as a ``django.tasks`` task (django-tasks-db, dj_queue)."""
    ledger.record(job_id)
