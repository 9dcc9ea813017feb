"""Atomic mode: database effects exactly once.

Each handler runs inside the transaction that records its outcome, behind a fenced row lock,
one job (or one ``queue_atomic_group``) per transaction. In a group every handler runs inside
its own ``transaction.atomic()`` (a savepoint), so a failing one rolls back alone, whatever it
did to the transaction, and its own error is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction
from django.db.transaction import TransactionManagementError

from .. import claims, outcomes
from .sizing import atomic_group

if TYPE_CHECKING:
    from ..models import QueueMixin
    from .jobs import Batch


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


def run_atomic(batch: Batch) -> None:
    group = atomic_group(batch.model)
    for start in range(0, len(batch.rows), group):
        if batch.must_stop():
            batch.release(batch.rows[start:])
            return
        chunk = batch.rows[start : start + group]
        # From here the row lock keeps the rows, not the lease: renewing them would wait
        # for that lock.
        batch.worker.keeper.forget(batch.claim, [row.pk for row in chunk])
        if len(chunk) == 1:
            _one(batch, chunk[0])
        else:
            _group(batch, chunk)
        if batch.abandoned:
            return


def _one(batch: Batch, row: QueueMixin) -> None:
    using = batch.claim.using
    error: BaseException | None = None
    committing = lost = False
    try:
        with transaction.atomic(using=using):
            if not claims.lock_held(batch.model, [row.pk], batch.claim):
                lost = True
            else:
                error = batch.cancelled(row) or batch.worker.call(row) or left_for_rollback(using)
                # Asked to cancel while it ran, and it finished anyway: nothing of it commits.
                error = error or batch.cancelled(row)
                if error is not None:
                    transaction.set_rollback(True, using=using)
                else:
                    # Lost only if the handler deleted its own row: what it did commits.
                    lost = bool(outcomes.succeed(batch.model, [row], batch.claim))
                    committing = True
    except Exception as exc:  # noqa: BLE001 - sorted out below
        if committing and claims.succeeded(batch.model, row.pk, batch.claim):
            batch.after_commit_error(row, exc)
            return
        error = batch.rolled_back(exc)
    if batch.left_in_transaction([row]):
        return
    if lost:
        batch.lost(row)
    elif error is not None:
        batch.fail(row, error)
    else:
        batch.stats.succeeded += 1


def _group(batch: Batch, chunk: list[QueueMixin]) -> None:
    using = batch.claim.using
    done: list[QueueMixin] = []
    failed: list[tuple[QueueMixin, BaseException]] = []
    held: set[Any] = set()
    committing = False
    try:
        with transaction.atomic(using=using):
            held = claims.lock_held(batch.model, [row.pk for row in chunk], batch.claim)
            for row in chunk:
                if row.pk in held:
                    error = _in_savepoint(batch, row)
                    if error is None:
                        done.append(row)
                    else:
                        failed.append((row, error))
            lost = outcomes.succeed(batch.model, done, batch.claim)
            for row, error in failed:
                outcomes.fail(row, batch.claim, error)  # cannot be lost: its lock is held
            committing = True
    except Exception as exc:  # noqa: BLE001 - sorted out below
        first = next(iter(held), None)
        if committing and first is not None and _group_committed(batch, done, failed):
            batch.after_commit_error(done[0] if done else failed[0][0], exc)
            return
        # Nothing of the group committed, its failures written inside it neither.
        error = batch.rolled_back(exc)
        for row in chunk:
            if row.pk in held:
                batch.fail(row, error)
            else:
                batch.lost(row)
        return
    if batch.left_in_transaction(chunk):
        return
    for row in chunk:
        if row.pk not in held:
            batch.lost(row)
    batch.stats.succeeded += len(done) - len(lost)
    batch.stats.failed += len(failed)
    batch.stats.lost += len(lost)


def _in_savepoint(batch: Batch, row: QueueMixin) -> BaseException | None:
    using = batch.claim.using
    try:
        with transaction.atomic(using=using):
            error = batch.cancelled(row) or batch.worker.call(row) or left_for_rollback(using)
            error = error or batch.cancelled(row)  # see _one
            if error is not None:
                raise HandlerFailed(error)
    except HandlerFailed as failed:
        return failed.error
    except DatabaseError as exc:
        # The savepoint could not be released (e.g. PostgreSQL after an error the
        # handler swallowed): Django rolled it back; the handler's attempt failed.
        if batch.connection_lost(exc):
            raise
        return exc
    return None


def _group_committed(
    batch: Batch, done: list[QueueMixin], failed: list[tuple[QueueMixin, BaseException]]
) -> bool:
    row = done[0] if done else failed[0][0] if failed else None
    if row is None:
        return False
    if done:
        return claims.succeeded(batch.model, row.pk, batch.claim)
    return not claims.fenced(batch.model, [row.pk], batch.claim).exists()
