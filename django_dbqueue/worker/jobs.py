"""Running one claimed batch: the handlers, and the outcome each one leads to.

Lease mode (at-least-once): the handler runs first, its outcome is written after; the
successes of a batch are written together, one fenced UPDATE per flush.

Atomic mode (database effects exactly once): the handler runs inside the transaction that
records its outcome, behind a fenced row lock, one job (or one ``queue_atomic_group``) per
transaction. In a group every handler runs behind its own savepoint, so a failing one rolls
back alone, whatever it did to the transaction.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from .. import outcomes
from ..backends import backend_for
from ..conf import settings
from ..exceptions import JobCancelled, LeaseLost
from ..leases import Claim
from . import leaks
from .atomic import run_atomic

if TYPE_CHECKING:
    from ..models import QueueMixin
    from .loop import Worker

logger = logging.getLogger("django_dbqueue.worker")


class Batch:
    """The rows of one claim, run by ``worker``."""

    def __init__(self, worker: Worker, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim) -> None:
        self.worker = worker
        self.model = model
        self.rows = rows
        self.claim = claim
        self.stats = worker.stats
        self.abandoned = False  # this connection is beyond use: the rest was given back

    def run(self) -> None:
        if self.model.queue_atomic:
            run_atomic(self)
        else:
            self._leased()

    def must_stop(self) -> bool:
        return self.worker.stopping or self.worker.fatal is not None

    # -- lease mode --------------------------------------------------------------------------

    def _leased(self) -> None:
        done: list[QueueMixin] = []
        lost = self.worker.keeper.lost_ids(self.claim)
        flush_interval = settings.FLUSH_INTERVAL
        last_flush = time.monotonic()
        for index, row in enumerate(self.rows):
            if self.must_stop():
                self.release(self.rows[index:])
                break
            if row.pk in lost:
                # Its lease ran out while this worker was held up and another worker has it
                # now: running it here would only be a duplicate.
                self.lost(row)
                continue
            error = self.worker.call(row)
            leak = None if self.worker.in_transaction else leaks.left_open(self.claim.using)
            if leak is not None:
                if not self._leaked(row, leak, done, self.rows[index + 1 :]):
                    return  # this connection is beyond use: the worker stops
                done = []
                continue
            if error is None:
                done.append(row)
            else:
                self.fail(row, error)
            if time.monotonic() - last_flush >= flush_interval:
                self._flush(done)
                done, last_flush = [], time.monotonic()
        self._flush(done)

    def _flush(self, done: list[QueueMixin]) -> None:
        """Write the successes of lease mode, unless a handler among them sent a raw BEGIN:
        then everything since sits in a transaction that would never commit. It is rolled
        back, and the rows go back to be claimed one by one (a row alone takes the blame)."""
        backend = backend_for(self.claim.using)
        if not done or self.worker.in_transaction or not backend.server_in_transaction():
            self._succeed(done)
            return
        connections[self.claim.using].rollback()
        logger.error(
            "worker %s: a handler of %s left a transaction open (a raw BEGIN?); rolled back",
            self.worker.worker_id,
            self.model._meta.label,
        )
        leak = leaks.LeakedTransaction("a handler left a transaction open (a raw BEGIN?)")
        if len(done) == 1:
            self.fail(done[0], leak, alone=True)  # it was the one
        else:  # one of them: each runs again alone, and the one alone takes the blame
            for row in done:
                outcomes.requeue_alone(row, self.claim, leak)
            self.stats.failed += len(done)

    def _leaked(
        self, row: QueueMixin, leak: leaks.LeakedTransaction, done: list[QueueMixin], rest: list[QueueMixin]
    ) -> bool:
        """Fail the job that left a transaction open, and put the connection right; False if
        it cannot be: the outcomes are then written on a fresh connection and the worker stops
        (its supervisor starts a new process)."""
        logger.error("%s pk=%s: %s", self.model._meta.label, row.pk, leak)
        if leaks.restore(self.claim.using):
            self._succeed(done)
            self.fail(row, leak)
            return True

        def write() -> None:
            self._succeed(done)
            self.fail(row, leak)
            self.release(rest)

        leaks.on_a_fresh_connection(write)
        self.worker.fatal = leak
        return False

    def left_in_transaction(self, rows: list[QueueMixin]) -> bool:
        """Atomic mode: a handler entered ``atomic()`` and did not leave it, so the worker's
        own block closed the handler's instead and the job's transaction never ended: its
        outcome and every later statement would sit in it, holding the rows' locks. Nothing of
        it committed. The connection is closed (the server rolls it all back); on a fresh one
        the job fails (a group's rows run again alone: one of them did it) and the rest of the
        batch is given back; the worker stops (its supervisor starts a new process)."""
        leak = None if self.worker.in_transaction else leaks.left_open(self.claim.using)
        if leak is None:
            return False
        logger.error("%s pk=%s: %s", self.model._meta.label, ", ".join(str(row.pk) for row in rows), leak)
        usable = leaks.restore(self.claim.using)
        rest = self.rows[self.rows.index(rows[-1]) + 1 :]

        def write() -> None:
            if len(rows) == 1:
                self.fail(rows[0], leak)
            else:
                for row in rows:
                    outcomes.requeue_alone(row, self.claim, leak)
                self.stats.failed += len(rows)
            self.release(rest)

        if usable:
            write()
        else:
            leaks.on_a_fresh_connection(write)
            self.worker.fatal = leak
        self.abandoned = True
        return True

    # -- outcomes ----------------------------------------------------------------------------

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
                self.worker.worker_id,
                self.model._meta.label,
                exc,
            )
        return exc

    def after_commit_error(self, row: QueueMixin, exc: BaseException) -> None:
        logger.error(
            "%s pk=%s committed, then an on_commit() hook raised",
            self.model._meta.label,
            row.pk,
            exc_info=exc,
        )
        outcomes.after_commit_error(row, self.claim, exc)
        self.stats.succeeded += 1

    def _succeed(self, done: list[QueueMixin]) -> None:
        if not done:
            return
        lost = outcomes.succeed(self.model, done, self.claim)
        self.worker.keeper.forget(self.claim, [row.pk for row in done])
        self.stats.succeeded += len(done) - len(lost)
        self.stats.lost += len(lost)

    def cancelled(self, row: QueueMixin) -> JobCancelled | None:
        """Atomic mode: someone asked to cancel the row (its handler may not have noticed)."""
        if row.pk in self.worker.keeper.cancelled_ids(self.claim):
            return JobCancelled("cancelled on request")
        return None

    def fail(self, row: QueueMixin, error: BaseException, alone: bool = False) -> None:
        try:
            outcomes.fail(row, self.claim, error, alone=alone)
            if isinstance(error, JobCancelled):
                self.stats.cancelled += 1
            else:
                self.stats.failed += 1
        except LeaseLost:
            self.stats.lost += 1
        self.worker.keeper.forget(self.claim, [row.pk])

    def lost(self, row: QueueMixin) -> None:
        if row.pk in self.worker.keeper.cancelled_ids(self.claim):  # by the keeper: not lost
            logger.info("%s pk=%s was cancelled on request before it ran", self.model._meta.label, row.pk)
            self.stats.cancelled += 1
            return
        logger.warning(
            "%s pk=%s is no longer held by worker %s (lease lost); skipped",
            self.model._meta.label,
            row.pk,
            self.worker.worker_id,
        )
        self.stats.lost += 1

    def release(self, rows: list[QueueMixin]) -> None:
        if not rows:
            return
        released = outcomes.release(self.model, [row.pk for row in rows], self.claim)
        self.stats.released += released
        logger.info(
            "worker %s gave back %d unstarted %s row(s)",
            self.worker.worker_id,
            released,
            self.model._meta.label,
        )
