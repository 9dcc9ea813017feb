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
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.transaction import TransactionManagementError

from .. import outcomes
from ..backends import backend_for
from ..conf import settings
from ..exceptions import LeaseLost
from ..leases import Claim
from .sizing import atomic_group

if TYPE_CHECKING:
    from ..models import QueueMixin
    from .loop import Worker

logger = logging.getLogger("django_dbqueue.worker")


class HandlerFailed(Exception):
    """Carries a handler's error out of its savepoint, so the savepoint rolls back."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def left_for_rollback(using: str) -> TransactionManagementError | None:
    """The handler returned normally but marked its transaction for rollback
    (``set_rollback(True)``, or a database error it caught inside ``atomic()``)."""
    if transaction.get_rollback(using=using):
        return TransactionManagementError("the handler left its transaction marked for rollback")
    return None


class Batch:
    """The rows of one claim, run by ``worker``."""

    def __init__(self, worker: Worker, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim) -> None:
        self.worker = worker
        self.model = model
        self.rows = rows
        self.claim = claim
        self.stats = worker.stats

    def run(self) -> None:
        if self.model.queue_atomic:
            self._atomic()
        else:
            self._leased()

    def _must_stop(self) -> bool:
        return self.worker.stopping or self.worker.fatal is not None

    # -- lease mode --------------------------------------------------------------------------

    def _leased(self) -> None:
        done: list[QueueMixin] = []
        lost = self.worker.keeper.lost_ids(self.claim)
        flush_interval = settings.FLUSH_INTERVAL
        last_flush = time.monotonic()
        for index, row in enumerate(self.rows):
            if self._must_stop():
                self._release(self.rows[index:])
                break
            if row.pk in lost:
                # Its lease ran out while this worker was held up and another worker has it
                # now: running it here would only be a duplicate.
                self._lost(row)
                continue
            error = self.worker.call(row)
            if error is None:
                done.append(row)
            else:
                self._fail(row, error)
            if time.monotonic() - last_flush >= flush_interval:
                self._succeed(done)
                done, last_flush = [], time.monotonic()
        self._succeed(done)

    # -- atomic mode -------------------------------------------------------------------------

    def _atomic(self) -> None:
        group = atomic_group(self.model)
        for start in range(0, len(self.rows), group):
            if self._must_stop():
                self._release(self.rows[start:])
                return
            chunk = self.rows[start : start + group]
            # From here the row lock keeps the rows, not the lease: renewing them would wait
            # for that lock.
            self.worker.keeper.forget(self.claim, [row.pk for row in chunk])
            if len(chunk) == 1:
                self._atomic_one(chunk[0])
            else:
                self._atomic_group(chunk)

    def _atomic_one(self, row: QueueMixin) -> None:
        using = self.claim.using
        error: BaseException | None = None
        committing = lost = False
        try:
            with transaction.atomic(using=using):
                if not outcomes.lock_held(self.model, [row.pk], self.claim):
                    lost = True
                else:
                    error = self.worker.call(row) or left_for_rollback(using)
                    if error is not None:
                        transaction.set_rollback(True, using=using)
                    else:
                        # Lost only if the handler deleted its own row: what it did commits.
                        lost = bool(outcomes.succeed(self.model, [row], self.claim))
                        committing = True
        except Exception as exc:  # noqa: BLE001 - sorted out below
            if committing and outcomes.succeeded(self.model, row.pk, self.claim):
                self._after_commit_error(row, exc)
                return
            error = self._rolled_back(exc)
        if lost:
            self._lost(row)
        elif error is not None:
            self._fail(row, error)
        else:
            self.stats.succeeded += 1

    def _atomic_group(self, chunk: list[QueueMixin]) -> None:
        using = self.claim.using
        done: list[QueueMixin] = []
        failed: list[tuple[QueueMixin, BaseException]] = []
        held: set[Any] = set()
        committing = False
        try:
            with transaction.atomic(using=using):
                held = outcomes.lock_held(self.model, [row.pk for row in chunk], self.claim)
                for row in chunk:
                    if row.pk in held:
                        error = self._in_savepoint(row)
                        if error is None:
                            done.append(row)
                        else:
                            failed.append((row, error))
                lost = outcomes.succeed(self.model, done, self.claim)
                for row, error in failed:
                    outcomes.fail(row, self.claim, error)  # cannot be lost: its lock is held
                committing = True
        except Exception as exc:  # noqa: BLE001 - sorted out below
            first = next(iter(held), None)
            if committing and first is not None and self._group_committed(done, failed):
                self._after_commit_error(done[0] if done else failed[0][0], exc)
                return
            # Nothing of the group committed, its failures written inside it neither.
            error = self._rolled_back(exc)
            for row in chunk:
                if row.pk in held:
                    self._fail(row, error)
                else:
                    self._lost(row)
            return
        for row in chunk:
            if row.pk not in held:
                self._lost(row)
        self.stats.succeeded += len(done) - len(lost)
        self.stats.failed += len(failed)
        self.stats.lost += len(lost)

    def _in_savepoint(self, row: QueueMixin) -> BaseException | None:
        using = self.claim.using
        try:
            with transaction.atomic(using=using):
                error = self.worker.call(row) or left_for_rollback(using)
                if error is not None:
                    raise HandlerFailed(error)
        except HandlerFailed as failed:
            return failed.error
        except DatabaseError as exc:
            # The savepoint could not be released (e.g. PostgreSQL after an error the
            # handler swallowed): Django rolled it back; the handler's attempt failed.
            if self._connection_lost(exc):
                raise
            return exc
        return None

    def _group_committed(
        self, done: list[QueueMixin], failed: list[tuple[QueueMixin, BaseException]]
    ) -> bool:
        row = done[0] if done else failed[0][0] if failed else None
        if row is None:
            return False
        if done:
            return outcomes.succeeded(self.model, row.pk, self.claim)
        return not outcomes.fenced(self.model, [row.pk], self.claim).exists()

    # -- outcomes ----------------------------------------------------------------------------

    def _connection_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, InterfaceError) or (
            isinstance(exc, OperationalError) and not backend_for(self.claim.using).is_lock_conflict(exc)
        )

    def _rolled_back(self, exc: BaseException) -> BaseException:
        """The transaction of an atomic job or group failed as a whole: a deadlock in a
        handler's writes, or a constraint failing at commit. Each of its jobs gets a failed
        attempt. A lost connection is no handler's failure: it goes up (nothing committed;
        the leases bring the rows back)."""
        if isinstance(exc, DatabaseError):
            if self._connection_lost(exc):
                raise exc
            logger.warning(
                "worker %s: atomic transaction of %s rolled back: %s",
                self.worker.worker_id,
                self.model._meta.label,
                exc,
            )
        return exc

    def _after_commit_error(self, row: QueueMixin, exc: BaseException) -> None:
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

    def _fail(self, row: QueueMixin, error: BaseException) -> None:
        try:
            outcomes.fail(row, self.claim, error)
            self.stats.failed += 1
        except LeaseLost:
            self.stats.lost += 1
        self.worker.keeper.forget(self.claim, [row.pk])

    def _lost(self, row: QueueMixin) -> None:
        logger.warning(
            "%s pk=%s is no longer held by worker %s (lease lost); skipped",
            self.model._meta.label,
            row.pk,
            self.worker.worker_id,
        )
        self.stats.lost += 1

    def _release(self, rows: list[QueueMixin]) -> None:
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
