"""One claim's rows, run: the outcome each row's run leads to, decided as an
:class:`~django_dbqueue.queue.outcome.Outcome` and written with
:func:`~django_dbqueue.queue.record.record` (the one writer of queue columns after a claim),
and counted in the worker's stats.

Lease mode (``leased``) and atomic mode (``atomic``) run the rows; this is what they share.
What they take from their worker is :class:`ExecutionContext`, and nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import DatabaseError, InterfaceError, OperationalError, transaction

from ..backends import backend_for
from ..exceptions import JobCancelled, Park
from ..queue.lease import Claim
from ..queue.outcome import End, Outcome
from ..queue.record import Recorded, record, record_fenced_success
from .lease import LeaseKeeper
from .stats import WorkerStats
from .stop import StopFlag

if TYPE_CHECKING:
    from ..models import QueueMixin
    from ..queue.row import QueueRow

logger = logging.getLogger("django_dbqueue.worker")


@dataclass(frozen=True)
class ExecutionContext:
    """What running a claim's rows takes from its worker."""

    worker_id: str
    #: Runs one handler; returns what it raised (None on success). See ``calls``.
    call: Callable[[QueueMixin], BaseException | None]
    keeper: LeaseKeeper
    stats: WorkerStats
    stop: StopFlag
    #: Inside a caller's transaction (a TestCase): the connection's state is the caller's,
    #: not a handler's leak.
    in_transaction: bool = False


class ClaimedRows:
    """The rows of one claim (of ``model``), run with ``context``."""

    def __init__(
        self, context: ExecutionContext, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim
    ) -> None:
        self.context = context
        self.model = model
        self.rows = rows
        self.claim = claim
        self.abandoned = False  # this connection is beyond use: the rest was given back
        #: Atomic mode: what the handlers read of their rows was read for all of them at once
        #: (``process.preload``), so each run's first statement may be its success UPDATE.
        self.preloaded = False
        #: Atomic mode: each job's first statement is its success UPDATE (``atomic._hold``),
        #: decided once for the claim (``atomic._writes_success_first``).
        self.success_first = False
        #: The keys someone asked to cancel: the keeper's set of this claim, which its thread
        #: fills in place (asked for once, not under the keeper's lock for every job).
        self.cancel_requested = context.keeper.cancelled_ids(claim)

    def must_stop(self) -> bool:
        return self.context.stop.must_stop()

    # -- writing outcomes --------------------------------------------------------------------

    def write(self, outcomes: Sequence[Outcome]) -> Recorded:
        """Record ``outcomes`` (inside the caller's transaction, if there is one: atomic mode);
        the keeper stops renewing their rows. Not counted yet: see :meth:`count`."""
        recorded = record(self.model, self.claim, outcomes)
        self.context.keeper.forget(self.claim, [outcome.pk for outcome in outcomes])
        return recorded

    def write_fenced_success(self, row: QueueMixin, written_at: datetime) -> Recorded:
        """Atomic mode: the rest of ``row``'s success, whose UPDATE went first (see
        :func:`~django_dbqueue.queue.record.fence_success`). Not counted yet either."""
        # The keeper forgot the row already: run_atomic() did before its transaction began.
        return record_fenced_success(self.model, self.claim, row, written_at)

    def count(self, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
        """Add what ``recorded`` says of ``outcomes`` to the worker's stats, once it holds
        (atomic mode: once its transaction committed)."""
        stats = self.context.stats
        rejected = {outcome.pk for outcome in recorded.rejected}
        for outcome in outcomes:
            if outcome.end is End.HOOK_FAILED:
                stats.succeeded += 1  # its job committed, whatever its hook did
            elif outcome.pk in rejected:
                # The claim was lost; a row given back that another worker holds now was not
                # this worker's to give, and is not counted.
                if outcome.end is not End.GIVEN_BACK:
                    stats.lost += 1
            elif outcome.end is End.SUCCEEDED:
                stats.succeeded += 1
            elif outcome.end is End.CANCELLED:
                stats.cancelled += 1
            elif outcome.end is End.GIVEN_BACK:
                stats.released += 1
            elif outcome.end is End.DEFERRED:
                stats.parked += 1
            else:  # failed: retried or not
                stats.failed += 1

    def finish(self, outcomes: Sequence[Outcome]) -> Recorded:
        """Write ``outcomes`` in a transaction of their own and count them."""
        recorded = self.write(outcomes)
        self.count(outcomes, recorded)
        return recorded

    def fail(self, row: QueueRow, error: BaseException, alone: bool = False) -> None:
        self.finish([Outcome.failed(row, error, alone=alone)])

    def retry_alone(self, rows: Sequence[QueueRow], error: BaseException) -> None:
        """Send ``rows`` back to be claimed one by one: one of them harmed the worker, and
        the one alone takes the blame."""
        self.finish([Outcome.retried_alone(row, error) for row in rows])

    def give_back(self, rows: Sequence[QueueRow]) -> None:
        """Rows not started (the worker stops): READY again, their attempt not counted."""
        if not rows:
            return
        recorded = self.finish([Outcome.given_back(row) for row in rows])
        logger.info(
            "worker %s gave back %d unstarted %s row(s)",
            self.context.worker_id,
            len(recorded.written),
            self.model._meta.label,
        )

    def parked(self, row: QueueRow, park: Park, in_place: bool = False) -> Outcome:
        """The outcome of a run that raised :class:`~django_dbqueue.exceptions.Park`: READY
        again at its due time (from the claim's database clock), the attempt not counted.
        ``in_place``: its success was written first (atomic mode) and becomes the park."""
        until = park.until
        if until is None or isinstance(until, timedelta):
            until = self.claim.now() + (until or timedelta(0))
        assert isinstance(until, datetime)
        return Outcome.deferred(row, until, in_place=in_place, due_if=park.due_if)

    def write_parked(self, row: QueueRow, park: Park, in_place: bool = False) -> Recorded:
        """Write a park and call its ``then`` in the same transaction (the caller's in
        atomic mode), once the row is written and locked; not counted yet."""
        with transaction.atomic(using=self.claim.using, savepoint=False):
            recorded = self.write([self.parked(row, park, in_place)])
            if park.then is not None and row.pk in recorded:
                park.then()
        return recorded

    def park(self, row: QueueRow, park: Park) -> None:
        """Lease mode: write a park in a transaction of its own and count it."""
        outcome = self.parked(row, park)
        recorded = self.write_parked(row, park)
        self.count([outcome], recorded)

    def after_commit_error(self, row: QueueMixin, exc: BaseException) -> None:
        logger.error(
            "%s pk=%s committed, then an on_commit() hook raised",
            self.model._meta.label,
            row.pk,
            exc_info=exc,
        )
        self.finish([Outcome.hook_failed(row, exc)])

    def lost(self, row: QueueMixin) -> None:
        """``row`` is no longer this claim's: nothing to write."""
        if row.pk in self.cancel_requested:  # by the keeper: not lost
            logger.info("%s pk=%s was cancelled on request before it ran", self.model._meta.label, row.pk)
            self.context.stats.cancelled += 1
            return
        logger.warning(
            "%s pk=%s is no longer held by worker %s (lease lost); skipped",
            self.model._meta.label,
            row.pk,
            self.context.worker_id,
        )
        self.context.stats.lost += 1

    # -- what a run meets --------------------------------------------------------------------

    def cancelled(self, row: QueueMixin) -> JobCancelled | None:
        """Atomic mode: someone asked to cancel the row (its handler may not have noticed)."""
        if row.pk in self.cancel_requested:
            return JobCancelled("cancelled on request")
        return None

    def connection_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, InterfaceError) or (
            isinstance(exc, OperationalError) and not backend_for(self.claim.using).is_lock_conflict(exc)
        )

    def rolled_back(self, exc: BaseException) -> BaseException:
        """The transaction of an atomic job or group failed as a whole: a deadlock in a
        handler's writes, or a constraint failing at commit. Each of its jobs gets a failed
        attempt. A lost connection is no handler's failure: it goes up (nothing committed;
        the leases bring the rows back)."""
        if isinstance(exc, DatabaseError):
            if self.connection_lost(exc):
                raise exc
            logger.warning(
                "worker %s: atomic transaction of %s rolled back: %s",
                self.context.worker_id,
                self.model._meta.label,
                exc,
            )
        return exc
