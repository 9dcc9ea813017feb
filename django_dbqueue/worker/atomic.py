"""Atomic mode: database effects exactly once.

Each handler runs inside the transaction that records its outcome, behind a fenced row lock,
one job (or one ``queue_atomic_group``) per transaction. In a group every handler runs inside
its own ``transaction.atomic()`` (a savepoint), so a failing one rolls back alone, whatever it
did to the transaction, and its own error is kept.

An optimistic group (``queue_atomic_group_optimistic = True``) runs its handlers without the
savepoints, the two statements per job they cost: a handler that fails, whatever it did to the
transaction, rolls the whole group back, and the group runs again with them, the failed row
not again (its own error is kept), as do the claim's later groups. What commits is the same as
with the savepoints; what differs is that the handlers run before the failed one ran twice, so
their effects outside the database (those not in ``on_commit()``, which a rollback drops) happen
twice, as they do after a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction
from django.db.transaction import TransactionManagementError

from ..backends import backend_for
from ..exceptions import Park
from ..queue import claims
from ..queue.outcome import Outcome
from ..queue.record import Recorded, fence_success
from ..queue.statements import statements
from . import leaks
from .claimed import ClaimedRows
from .sizing import atomic_group

if TYPE_CHECKING:
    from ..models import QueueMixin

logger = logging.getLogger("django_dbqueue.worker")


class HandlerFailed(Exception):
    """Carries a handler's error out of its savepoint, so the savepoint rolls back."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class GroupFailed(Exception):
    """Carries the first failure of an optimistic group out of the group's transaction, so
    all of it rolls back (:func:`_bare`)."""

    def __init__(self, row: QueueMixin, error: BaseException) -> None:
        super().__init__(str(error))
        self.row = row
        self.error = error


def left_for_rollback(using: str) -> TransactionManagementError | None:
    """The handler returned normally but marked its transaction for rollback
    (``set_rollback(True)``, or a database error it caught inside ``atomic()``)."""
    if transaction.get_rollback(using=using):
        return TransactionManagementError("the handler left its transaction marked for rollback")
    return None


def run_atomic(claimed: ClaimedRows) -> None:
    group = atomic_group(claimed.model)
    if group == 1:
        claimed.preloaded = _preload(claimed, claimed.rows)
    claimed.success_first = _writes_success_first(claimed)
    optimistic = optimistic_group(claimed.model)
    for start in range(0, len(claimed.rows), group):
        if claimed.must_stop():
            claimed.give_back(claimed.rows[start:])
            return
        chunk = claimed.rows[start : start + group]
        # From here the row lock keeps the rows, not the lease: renewing them would wait
        # for that lock.
        claimed.context.keeper.forget(claimed.claim, [row.pk for row in chunk])
        if len(chunk) == 1:
            _one(claimed, chunk[0])
        elif optimistic:
            optimistic = _optimistic(claimed, chunk)
        else:
            _group(claimed, chunk, _in_savepoint)
        if claimed.abandoned:
            return


def _preload(claimed: ClaimedRows, rows: list[QueueMixin]) -> bool:
    """Before the claim's first transaction: what a handler reads of its rows, in one
    statement for all of them rather than one per row (a durable workflow's checkpoints:
    ``process.preload``), so that each run's first statement can be its success UPDATE,
    which locks the row without reading it (:func:`_hold`). Only for a claim of several
    rows: for one, a locking read that reads them too costs no more (``process.hold``).
    Returns whether it did."""
    preload = getattr(getattr(claimed.model, "process", None), "preload", None)
    if preload is None or len(rows) < 2:
        return False
    if not (backend_for(claimed.claim.using).skip_locked and success_first(claimed.model)):
        return False
    preload(rows, claimed.claim)
    return True


def _one(claimed: ClaimedRows, row: QueueMixin) -> None:
    using = claimed.claim.using
    error: BaseException | None = None
    park: Park | None = None
    committing = lost = False
    try:
        with transaction.atomic(using=using):
            held, written_at = _hold(claimed, row)
            if not held:
                lost = True
            else:
                park, error = _run_handler(claimed, row, written_at)
                if error is not None:
                    transaction.set_rollback(True, using=using)
                else:
                    # Lost only if the handler deleted its own row: what it did commits.
                    lost = bool(_write_end(claimed, row, park, written_at).rejected)
                    committing = True
    except Exception as exc:  # noqa: BLE001 - sorted out below
        if committing and _committed(claimed, row, park):
            claimed.after_commit_error(row, exc)
            return
        error = claimed.rolled_back(exc)
    if _left_in_transaction(claimed, [row]):
        return
    if lost:
        claimed.lost(row)
    elif error is not None:
        claimed.fail(row, error)
    elif park is not None:
        claimed.context.stats.parked += 1
    else:
        claimed.context.stats.succeeded += 1


def _hold(claimed: ClaimedRows, row: QueueMixin) -> tuple[bool, datetime | None]:
    """The job's first statement: whether the claim still holds ``row``, which stays locked
    until the job's transaction ends; and when its success was written, if it was.

    Where rows can be locked, the fenced success UPDATE is that statement (see
    :func:`~django_dbqueue.queue.record.fence_success`): one round trip where a locking read
    and the UPDATE after the handler were two; a failing handler rolls it back with its own
    writes. A model whose handler reads its own state RUNNING is the exception
    (:func:`success_first`): its row is locked by the read and its end written after the
    handler returns. So is a handler that may park (a durable workflow's), unless it parks in
    place and its claim's rows were preloaded (:func:`_preload`); its locking read is then its
    own (``process.hold``), which reads the run's checkpoints and events too. SQLite locks the
    whole database for the first write instead: a write before the handler would keep every
    other writer out while it runs, so there the read comes first and the success is written
    after the handler."""
    if claimed.success_first:
        written_at = fence_success(claimed.model, claimed.claim, row)
        return written_at is not None, written_at
    hold = getattr(getattr(claimed.model, "process", None), "hold", None)
    if hold is not None:
        return bool(hold(row, claimed.claim)), None
    return bool(statements(claimed.model, claimed.claim.using).lock_held([row.pk], claimed.claim)), None


def _writes_success_first(claimed: ClaimedRows) -> bool:
    """Whether each job of this claim starts with its success UPDATE (:func:`_hold`): decided
    once per claim, since it depends on the model and the database only (and on the preload,
    done before the first job), not on the row."""
    model = claimed.model
    first = success_first(model) and (claimed.preloaded or not may_park(model))
    return first and backend_for(claimed.claim.using).skip_locked


def _parked(
    claimed: ClaimedRows, row: QueueMixin, error: BaseException | None, written_at: datetime | None
) -> tuple[Park | None, BaseException | None]:
    """A run that raised :class:`Park` ended as it meant to: what it did commits with the
    park, unless it left its transaction marked for rollback or was cancelled meanwhile. A
    handler not marked as one that may park had its success written first (:func:`_hold`):
    its Park is an error, and nothing of the run commits."""
    if not isinstance(error, Park):
        return None, error
    if written_at is not None and not parks_in_place(claimed.model):
        return None, TypeError(
            f"{claimed.model.__name__}.process() raised Park, which only a handler that may park "
            "raises (a durable workflow's: decorate it with @workflow)"
        )
    return error, left_for_rollback(claimed.claim.using) or claimed.cancelled(row)


def success_first(model: type[QueueMixin]) -> bool:
    """Whether atomic mode writes ``model``'s success before its handler runs (:func:`_hold`):
    unless the model says not (``queue_success_first = False``: its handler reads its own
    state RUNNING, as a ``django.tasks`` task does) or its handler may park and cannot turn
    that success into its park."""
    wanted = bool(getattr(model, "queue_success_first", True))
    return wanted and (not may_park(model) or parks_in_place(model))


def parks_in_place(model: type[QueueMixin]) -> bool:
    """Whether ``model``'s handler, which may park, has its run's end written as any atomic
    job's (the success first) and a park turn that success into the park in the same
    transaction (``@workflow`` marks it ``parks_in_place``)."""
    return bool(getattr(getattr(model, "process", None), "parks_in_place", False))


def may_park(model: type[QueueMixin]) -> bool:
    """Whether ``model``'s handler may end a run by parking (raising :class:`Park`) rather
    than in success: a durable workflow's (``@workflow`` marks it ``may_park``)."""
    return bool(getattr(getattr(model, "process", None), "may_park", False))


def _write_end(
    claimed: ClaimedRows, row: QueueMixin, park: Park | None, written_at: datetime | None
) -> Recorded:
    """Write the end of a run that raised nothing (or parked), inside its transaction: the
    rest of a success whose UPDATE came first (:func:`_hold`), or all of it."""
    if park is not None:
        return claimed.write_parked(row, park, in_place=written_at is not None)
    if written_at is not None:
        return claimed.write_fenced_success(row, written_at)
    return claimed.write([Outcome.succeeded(row)])


def _committed(claimed: ClaimedRows, row: QueueMixin, park: Park | None) -> bool:
    """After an error at the commit: did the row's end commit all the same?"""
    if park is None:
        return claims.succeeded(claimed.model, row.pk, claimed.claim)
    return not claims.fenced(claimed.model, [row.pk], claimed.claim).exists()


def optimistic_group(model: type[QueueMixin]) -> bool:
    """Whether ``model``'s groups run their handlers without a savepoint each
    (``queue_atomic_group_optimistic``; see the module's docstring)."""
    return bool(getattr(model, "queue_atomic_group_optimistic", False))


def _optimistic(claimed: ClaimedRows, chunk: list[QueueMixin]) -> bool:
    """Run ``chunk`` as an optimistic group, and again with savepoints if a handler failed.
    Returns whether the claim's next groups may run optimistic too: not after a failure,
    which cost the handlers before it a second run (a claim whose handlers fail would pay
    that for every group); the next claim tries again."""
    first = _group(claimed, chunk, _bare)
    if first is None:
        return True
    if not _left_in_transaction(claimed, chunk):
        _group(claimed, chunk, _in_savepoint, {first.row.pk: first.error})
    return False


#: How a group runs one handler: its park or error (None: a success). :func:`_bare` raises
#: :class:`GroupFailed` instead of returning an error.
RunOne = Callable[["ClaimedRows", "QueueMixin"], "BaseException | None"]


def _group(
    claimed: ClaimedRows,
    chunk: list[QueueMixin],
    run: RunOne,
    settled: dict[Any, BaseException] | None = None,
) -> GroupFailed | None:
    """One transaction for the rows of ``chunk``, each handler run by ``run``; ``settled``:
    rows whose handler failed in the optimistic run before, their failure written with the
    rest and their handler not run again. Returns the optimistic run's first failure, the
    group rolled back (None: the group ended, committed or not, as the rows' outcomes say)."""
    using = claimed.claim.using
    settled = settled or {}
    done: list[QueueMixin] = []
    failed: list[tuple[QueueMixin, BaseException]] = []
    parked: list[tuple[QueueMixin, Park]] = []
    held: set[Any] = set()
    committing = False
    try:
        with transaction.atomic(using=using):
            fenced = statements(claimed.model, using)
            held = fenced.lock_held([row.pk for row in chunk], claimed.claim)
            for row in chunk:
                if row.pk in held:
                    error = settled.get(row.pk) or run(claimed, row)
                    if error is None:
                        done.append(row)
                    elif isinstance(error, Park):
                        parked.append((row, error))
                    else:
                        failed.append((row, error))
            # A failure cannot be lost: its lock is held; a success only if its handler
            # deleted its own row.
            outcomes = [Outcome.succeeded(row) for row in done]
            outcomes += [Outcome.failed(row, error) for row, error in failed]
            outcomes += [claimed.parked(row, park) for row, park in parked]
            recorded = claimed.write(outcomes)
            for row, park in parked:  # in the transaction, the rows written: see Park
                if park.then is not None and row.pk in recorded:
                    park.then()
            committing = True
    except GroupFailed as failed_first:
        return failed_first  # nothing of the group committed: it runs again, with savepoints
    except Exception as exc:  # noqa: BLE001 - sorted out below
        first = next(iter(held), None)
        others = [row for row, _error in failed] + [row for row, _park in parked]
        if committing and first is not None and _group_committed(claimed, done, others):
            claimed.after_commit_error(done[0] if done else others[0], exc)
            return None
        # Nothing of the group committed, its failures written inside it neither.
        error = claimed.rolled_back(exc)
        for row in chunk:
            if row.pk in held:
                claimed.fail(row, error)
            else:
                claimed.lost(row)
        return None
    if _left_in_transaction(claimed, chunk):
        return None
    for row in chunk:
        if row.pk not in held:
            claimed.lost(row)
    claimed.count(outcomes, recorded)
    return None


def _run_handler(
    claimed: ClaimedRows, row: QueueMixin, written_at: datetime | None = None
) -> tuple[Park | None, BaseException | None]:
    """One handler, in its job's transaction, its group's, or its own savepoint in a group:
    its park or its error (neither: a success). A row someone asked to cancel does not run;
    one asked to cancel while it ran, and that finished anyway, fails all the same (nothing of
    it commits). ``written_at``: when its success was written before it ran (:func:`_hold`;
    None in a group, which locks its rows by a read first; see :func:`_parked`)."""
    using = claimed.claim.using
    error = claimed.cancelled(row) or claimed.context.call(row) or left_for_rollback(using)
    return _parked(claimed, row, error or claimed.cancelled(row), written_at)


def _bare(claimed: ClaimedRows, row: QueueMixin) -> BaseException | None:
    """An optimistic group's run of one handler, in the group's transaction itself: its
    park (None: a success); any failure raises :class:`GroupFailed`, which rolls the group
    back. A row someone asked to cancel before it ran fails without running: it did
    nothing to undo."""
    cancelled = claimed.cancelled(row)
    if cancelled is not None:
        return cancelled
    park, error = _run_handler(claimed, row)
    if error is not None:
        raise GroupFailed(row, error)
    return park


def _in_savepoint(claimed: ClaimedRows, row: QueueMixin) -> BaseException | None:
    using = claimed.claim.using
    try:
        with transaction.atomic(using=using):
            park, error = _run_handler(claimed, row)
            if error is not None:
                raise HandlerFailed(error)
            if park is not None:
                return park  # kept: what it did commits with its park
    except HandlerFailed as failed:
        return failed.error
    except DatabaseError as exc:
        # The savepoint could not be released (e.g. PostgreSQL after an error the
        # handler swallowed): Django rolled it back; the handler's attempt failed.
        if claimed.connection_lost(exc):
            raise
        return exc
    return None


def _group_committed(claimed: ClaimedRows, done: list[QueueMixin], others: list[QueueMixin]) -> bool:
    """After an error at the commit: did the group commit all the same? ``others``: its
    failed and parked rows, whose claim ends with the commit."""
    if done:
        return claims.succeeded(claimed.model, done[0].pk, claimed.claim)
    if others:
        return not claims.fenced(claimed.model, [others[0].pk], claimed.claim).exists()
    return False


def _left_in_transaction(claimed: ClaimedRows, rows: list[QueueMixin]) -> bool:
    """A handler entered ``atomic()`` and did not leave it, so the worker's own block closed
    the handler's instead and the job's transaction never ended: its outcome and every later
    statement would sit in it, holding the rows' locks. Nothing of it committed. The
    connection is closed (the server rolls it all back); on a fresh one the job fails (a
    group's rows run again alone: one of them did it) and the rest of the claim is given
    back; the worker stops (its supervisor starts a new process)."""
    leak = None if claimed.context.in_transaction else leaks.left_open(claimed.claim.using)
    if leak is None:
        return False
    logger.error("%s pk=%s: %s", claimed.model._meta.label, ", ".join(str(row.pk) for row in rows), leak)
    usable = leaks.restore(claimed.claim.using)
    rest = claimed.rows[claimed.rows.index(rows[-1]) + 1 :]

    def write() -> None:
        if len(rows) == 1:
            claimed.fail(rows[0], leak)
        else:
            claimed.retry_alone(rows, leak)
        claimed.give_back(rest)

    if usable:
        write()
    else:
        leaks.on_a_fresh_connection(write)
        claimed.context.stop.fatal = leak
    claimed.abandoned = True
    return True
