"""The executor: runs one claim's rows in the mode their model asks for, and records the
outcome each one leads to.

Lease mode (``leased``, at-least-once): the handler runs first, its outcome is written after;
the successes are written together, one ``record()`` per flush. Atomic mode (``atomic``,
database effects exactly once): the handler runs inside the transaction that records its
outcome, one job (or one ``queue_atomic_group``) per transaction. Either way an outcome is an
:class:`~django_dbqueue.queue.outcome.Outcome` written by
:func:`~django_dbqueue.queue.record.record`; what the executor takes from its worker is an
:class:`~django_dbqueue.worker.claimed.ExecutionContext` (the stop flag, the stats, the lease
keeper, the handler call, the worker's id), not the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..queue.lease import Claim
from .atomic import run_atomic
from .claimed import ClaimedRows, ExecutionContext
from .leased import run_leased

if TYPE_CHECKING:
    from ..models import QueueMixin


def execute(context: ExecutionContext, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim) -> None:
    """Run ``rows``, all of ``claim``; each ends recorded, given back, or known lost."""
    claimed = ClaimedRows(context, model, rows, claim)
    if model.queue_atomic:
        run_atomic(claimed)
    else:
        run_leased(claimed)


__all__ = ["ClaimedRows", "ExecutionContext", "execute"]
