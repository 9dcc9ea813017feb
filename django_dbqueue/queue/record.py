"""``record()``: the one writer of queue columns after a claim.

Every end of a claimed row (see :mod:`django_dbqueue.queue.outcome`) is written here, in one
transaction per call: the outcomes are grouped by their end, each group is one fenced UPDATE
(``WHERE pk … AND queue_token = <the claim's token>``) where the group shares its values, the
attempt rows are appended, the composition and cancellation hooks run, and the signals are
sent once the transaction commits. A worker that lost its claim therefore never writes over
the row's new holder: its late outcome is logged, ``job_rejected`` is sent, and
:class:`Recorded` lists it as rejected.

A final state (succeeded, failed, cancelled) stores the token negated and a retry or a
give-back clears it, so only a live claim carries a positive token: the token alone fences,
and the statements stay on the primary key (no lock on the state index that other workers'
outcomes would wait for).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import Case, DateTimeField, F, Value, When
from django.dispatch import Signal

from .. import signals
from ..backends import DbNow, retry_on_lock_conflicts
from ..retry import retry_at as decide_retry
from ..states import AttemptOutcome, QueueState
from . import extensions
from .claims import fenced, rows_of
from .history import ATTEMPT_FIELDS, attempt_for, copy_attempts, write_attempts
from .lease import RUN_ALONE, Claim
from .outcome import End, Outcome
from .row import COMPOSITION_FIELDS
from .statements import statements

if TYPE_CHECKING:
    from .row import QueueRow

# The logger keeps the name it has always had, so logging settings that name it still apply.
logger = logging.getLogger("django_dbqueue.outcomes")

#: What a claim's end clears of the claim on the row.
UNCLAIMED = {"queue_token": None, "queue_locked_by": None, "queue_locked_until": None}
#: What the writer reads of a row it knows by key only: its attempt row, its compositions.
_ENDED_FIELDS = (*ATTEMPT_FIELDS, *COMPOSITION_FIELDS)


@dataclass
class Recorded:
    """What :func:`record` wrote: the keys written, the outcomes rejected (their claim was
    lost: nothing written for them), and for each FAILED outcome when its row runs again
    (``None``: it ended FAILED for good)."""

    written: set[Any] = field(default_factory=set)
    rejected: list[Outcome] = field(default_factory=list)
    retry_at: dict[Any, datetime | None] = field(default_factory=dict)
    #: Keys this claim had already ended this way (the lease keeper wrote the cancellation
    #: the handler then raised): nothing to write, and nothing late either.
    already: set[Any] = field(default_factory=set)
    #: Signals to send once committed: (signal, keyword arguments).
    announcements: list[tuple[Signal, dict[str, Any]]] = field(default_factory=list)
    #: What the instances get once the write is through: (row, values, whether the claim is
    #: over). Not set while writing, since a lock conflict runs the writing again.
    updates: list[tuple[QueueRow, dict[str, Any], bool]] = field(default_factory=list)

    def __contains__(self, pk: Any) -> bool:
        return pk in self.written

    def update(self, row: QueueRow, values: dict[str, Any], claim_over: bool = False) -> None:
        self.updates.append((row, values, claim_over))


def record(model: type[QueueRow], claim: Claim, outcomes: Sequence[Outcome]) -> Recorded:
    """Write ``outcomes`` (rows of ``model`` held by ``claim``) in one transaction, or in the
    caller's (atomic mode: the handler's effects and its outcome commit together)."""
    if not outcomes:
        return Recorded()
    groups: dict[End, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.end, []).append(outcome)

    def write() -> Recorded:
        recorded = Recorded()
        now = claim.now()
        with transaction.atomic(using=claim.using, savepoint=False):
            for end, group in groups.items():
                _WRITERS[end](model, claim, group, now, recorded)
        return recorded

    if connections[claim.using].in_atomic_block:
        # The caller's transaction (atomic mode): a lock conflict there cannot be retried
        # (the transaction is rolled back), so the retrying wrapper has nothing to do.
        recorded = write()
    else:
        recorded = retry_on_lock_conflicts(claim.using, write, _what(groups))
    return _written(model, claim, outcomes, recorded)


def _written(
    model: type[QueueRow], claim: Claim, outcomes: Sequence[Outcome], recorded: Recorded
) -> Recorded:
    """What follows a write that went through: the instances get the values written, the
    late outcomes are logged, the signals wait for the commit."""
    plain: dict[int, list[tuple[str, Any]]] = {}  # a group's rows share one dict of values
    for row, values, claim_over in recorded.updates:
        items = plain.get(id(values))
        if items is None:
            items = plain[id(values)] = _plain(values)
        for name, value in items:
            setattr(row, name, value)
        if claim_over:
            row._queue_claim = None
    for outcome in outcomes:
        if outcome.pk not in recorded.written and outcome.pk not in recorded.already:
            recorded.rejected.append(outcome)
            _rejected(model, outcome, claim)
    _announce(model, claim.using, recorded.announcements)
    return recorded


def _what(groups: dict[End, list[Outcome]]) -> str:
    return ", ".join(end.value for end in groups)


# -- the groups ----------------------------------------------------------------------------------


def _succeeded(
    model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded
) -> None:
    rows = [outcome.row for outcome in group if outcome.row is not None]
    ids = [outcome.pk for outcome in group if outcome.row is not None]  # each row's pk, read once
    count = statements(model, claim.using).succeed(ids, claim, now)
    # A success the claim already recorded (a repeat) is written; a row another writer ended
    # (cancelled, failed) carries the same negated token, and the state tells them apart.
    written = set(ids) if count == len(ids) else _ended_by(model, claim, ids, QueueState.SUCCEEDED)
    copy_attempts(model, claim.using, list(written), -claim.token, AttemptOutcome.SUCCEEDED, now)
    _after_success(model, claim, rows, written, now, out)


def _after_success(
    model: type[QueueRow], claim: Claim, rows: list[QueueRow], written: set[Any], now: datetime, out: Recorded
) -> None:
    """The rest of a success once its UPDATE and attempt rows are written: the compositions,
    the instances' values, the signals."""
    # A row in no batch and with no dependants tells nobody (composition's ``ended`` hook would
    # return at once): the common success pays for no list and no call.
    if any(row.queue_batch is not None or row.queue_dependants for row in rows):
        extensions.tell_ended(model, claim.using, succeeded=[row for row in rows if row.pk in written])
    values = _success_values(claim, now)
    every = len(written) == len(rows)  # the common case: no pk to read again per row
    for row in rows:
        if every or row.pk in written:
            out.update(row, values)
            out.announcements.append((signals.job_succeeded, {"row": row}))
    out.written |= written


def _success_values(claim: Claim, now: datetime) -> dict[str, Any]:
    """The queue columns of a success written at ``now`` (the instance gets them too)."""
    return {
        "queue_state": QueueState.SUCCEEDED,
        "queue_token": -claim.token,
        "queue_finished_at": now,
        "queue_locked_until": None,
        "queue_last_error": "",
    }


# -- atomic mode's success, written before its handler runs ---------------------------------------


def fence_success(model: type[QueueRow], claim: Claim, row: QueueRow) -> datetime | None:
    """Atomic mode, first statement of the job's transaction, before its handler runs: the
    row's success UPDATE, fenced by the claim's token. It is the job's row lock too (a
    reclaimer's SKIP LOCKED passes the row by until the transaction ends) and its row count
    says whether the claim still holds (0: lost, the handler is not run). The handler's
    failure rolls it back with the handler's own writes; its success commits it with them,
    once :func:`record_fenced_success` has added the rest. Returns the finishing time
    written, or None when the claim is lost.

    One statement where a locking ``SELECT … FOR UPDATE`` and a later ``UPDATE`` were two.
    The handler sees its row SUCCEEDED already (in its own transaction; others see it
    RUNNING until the commit); ``save()`` of the instance writes domain fields only."""
    now = claim.now()
    if statements(model, claim.using).succeed([row.pk], claim, now) != 1:
        return None
    return now


def record_fenced_success(model: type[QueueRow], claim: Claim, row: QueueRow, now: datetime) -> Recorded:
    """The success of ``row`` whose UPDATE :func:`fence_success` wrote at ``now``, in the same
    transaction, after its handler returned: the attempt row, the compositions, the signals
    on commit. A row its handler deleted has no attempt row to copy: its outcome is rejected
    (logged; the handler's writes commit) when the history is on (its INSERT's row count
    tells); with the history off nothing is sent, and the deletion goes unnoticed."""
    pk = row.pk
    copied = copy_attempts(model, claim.using, [pk], -claim.token, AttemptOutcome.SUCCEEDED, now)
    if copied == 0:  # the handler deleted its row: the general path logs the outcome late
        recorded = Recorded()
        _after_success(model, claim, [row], set(), now, recorded)
        return _written(model, claim, [Outcome.succeeded(row)], recorded)
    # One row written: what _after_success() and _written() do for it, without their lists
    # and groupings (atomic mode's every job comes here; issue #33).
    if row.queue_batch is not None or row.queue_dependants:
        extensions.tell_ended(model, claim.using, succeeded=[row])
    for name, value in _success_values(claim, now).items():
        setattr(row, name, value)
    # Its signal and the successes' counters (metrics), on commit, as for a batch's write.
    _announce(model, claim.using, [(signals.job_succeeded, {"row": row})])
    return Recorded(written={pk})


def _failed(model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded) -> None:
    for outcome in group:
        row = outcome.row
        assert row is not None, "a failure is decided on an instance"
        retry_at = decide_retry(row.queue_retry_policy(), row.queue_attempts, outcome.error, now)
        text = outcome.reason
        values: dict[str, Any] = {"queue_last_error": text, "queue_locked_until": None}
        if retry_at is None:
            values.update(queue_state=QueueState.FAILED, queue_finished_at=now, queue_token=-claim.token)
        else:
            values.update(queue_state=QueueState.READY, queue_run_at=retry_at, **UNCLAIMED)
            if outcome.alone:
                values["queue_token"] = RUN_ALONE
        values.update(row.queue_failure_fields(outcome.error))
        if not fenced(model, [row.pk], claim).update(**values):
            continue
        attempt = AttemptOutcome.FAILED if retry_at is None else AttemptOutcome.RETRIED
        write_attempts(model, claim.using, [attempt_for(row, attempt, now, text)])
        if retry_at is None:
            extensions.tell_ended(model, claim.using, failed=[row])
        if retry_at is None:
            out.update(row, {**values, "queue_locked_by": claim.worker_id})
        else:
            out.update(row, values, claim_over=True)
        out.written.add(row.pk)
        out.retry_at[row.pk] = retry_at
        out.announcements.append(
            (signals.job_failed, {"row": row, "error": outcome.error, "retry_at": retry_at})
        )


def _retried_alone(
    model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded
) -> None:
    for outcome in group:
        row = outcome.row
        assert row is not None, "a retry is decided on an instance"
        text = outcome.reason
        values = {
            "queue_state": QueueState.READY,
            "queue_run_at": now,
            "queue_last_error": text,
            **UNCLAIMED,
            "queue_token": RUN_ALONE,
        }
        if not fenced(model, [row.pk], claim).update(**values):
            continue
        write_attempts(model, claim.using, [attempt_for(row, AttemptOutcome.RETRIED, now, text)])
        out.update(row, values, claim_over=True)
        out.written.add(row.pk)
        out.retry_at[row.pk] = now
        out.announcements.append((signals.job_failed, {"row": row, "error": outcome.error, "retry_at": now}))


def _given_back(
    model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded
) -> None:
    for alone in (False, True):
        part = [outcome for outcome in group if outcome.alone is alone]
        if part:
            values: dict[str, Any] = {"queue_state": QueueState.READY, **UNCLAIMED}
            if alone:
                values["queue_token"] = RUN_ALONE
            _not_counted(model, claim, part, values, out)


def _deferred(
    model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded
) -> None:
    for outcome in group:
        if outcome.in_place:
            _parked_in_place(model, claim, outcome, out)
            continue
        _not_counted(
            model,
            claim,
            [outcome],
            {"queue_state": QueueState.READY, "queue_run_at": outcome.until, **UNCLAIMED},
            out,
        )


def _parked_in_place(model: type[QueueRow], claim: Claim, outcome: Outcome, out: Recorded) -> None:
    """A deferral whose row's success this claim wrote first in the same transaction
    (:func:`fence_success`; a durable workflow's run in atomic mode): one UPDATE turns that
    success into the park, fenced by what the success wrote (the negated token, SUCCEEDED),
    which only this transaction can see. The row gets back what the success overwrote: its
    last error (as the claim loaded it) and no finishing time. With ``due_if`` it is due now
    where that condition holds (evaluated by this UPDATE, behind the row's lock)."""
    row = outcome.row
    assert row is not None, "a park in place is decided on an instance"
    until: Any = outcome.until
    if outcome.due_if is not None:
        until = Case(When(outcome.due_if, then=DbNow()), default=Value(until), output_field=DateTimeField())
    values: dict[str, Any] = {
        "queue_state": QueueState.READY,
        "queue_run_at": until,
        "queue_finished_at": None,
        "queue_last_error": row.queue_last_error,
        **UNCLAIMED,
    }
    succeeded = rows_of(model, claim.using).filter(
        pk=row.pk, queue_token=-claim.token, queue_state=QueueState.SUCCEEDED
    )
    if not succeeded.update(**values, queue_attempts=F("queue_attempts") - 1):
        return
    out.written.add(row.pk)
    if outcome.due_if is not None:
        values["queue_run_at"] = outcome.until  # the instance: the due time asked for
    out.update(row, {**values, "queue_attempts": row.queue_attempts - 1}, claim_over=True)


def _not_counted(
    model: type[QueueRow], claim: Claim, group: list[Outcome], values: dict[str, Any], out: Recorded
) -> None:
    """READY again with ``values``, the attempt the claim counted undone: no attempt row and
    no signal (nothing was tried)."""
    ids = [outcome.pk for outcome in group]
    # Which rows the claim still holds, locked, so the keys written are known exactly (a
    # group of one needs no read: the UPDATE's count says).
    held = set(ids) if len(ids) == 1 else statements(model, claim.using).lock_held(ids, claim)
    count = (
        fenced(model, list(held), claim).update(**values, queue_attempts=F("queue_attempts") - 1)
        if held
        else 0
    )
    if not count:
        return
    out.written |= held
    for outcome in group:
        if outcome.row is not None and outcome.pk in held:
            attempts = {"queue_attempts": outcome.row.queue_attempts - 1}
            out.update(outcome.row, {**values, **attempts}, claim_over=True)


def _ended(model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded) -> None:
    """CANCELLED and UNLOADABLE: ended for good with their reason, no retry; the rows are
    loaded here (a row that cannot load ends too, and the lease keeper knows only keys)."""
    by_reason: dict[str, list[Outcome]] = {}
    for outcome in group:
        by_reason.setdefault(outcome.reason, []).append(outcome)
    state = QueueState.CANCELLED if group[0].end is End.CANCELLED else QueueState.FAILED
    for reason, part in by_reason.items():
        # Locked first (SQLite: the transaction holds the only write lock), so the rows read
        # are the rows written, even racing the worker's own write of an outcome.
        ids = [outcome.pk for outcome in part]
        held = list(fenced(model, ids, claim).select_for_update().only(*_ENDED_FIELDS))
        instances = {outcome.pk: outcome.row for outcome in part if outcome.row is not None}
        if state is QueueState.CANCELLED and len(held) < len(ids):
            # The lease keeper may have ended some already, for this claim: nothing more to do.
            for pk in _ended_by(model, claim, ids, QueueState.CANCELLED):
                out.already.add(pk)
                if pk in instances:
                    out.update(instances[pk], {"queue_state": state}, claim_over=True)
        if not held:
            continue
        values = ended_values(state, reason, now, -claim.token)
        fenced(model, [row.pk for row in held], claim).update(**values)
        _finish_ended(model, claim.using, state, held, [(row, reason) for row in held], now)
        for row in held:
            shown = instances.get(row.pk, row)
            if shown is not row:
                out.update(shown, values, claim_over=state is QueueState.CANCELLED)
            else:
                _apply(row, values)  # loaded here: nobody else holds it
            out.written.add(row.pk)
            out.announcements.append(_final_signal(state, shown, reason))


def _expired(model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded) -> None:
    """The rescue's: READY again alone (the lost attempt keeps its number, so each run of a
    row has its own), or FAILED when its attempts are used up; a "lost" attempt row each."""
    for final in (False, True):
        part = [outcome for outcome in group if outcome.final is final]
        by_reason: dict[str, list[Outcome]] = {}
        for outcome in part:
            by_reason.setdefault(outcome.reason, []).append(outcome)
        for reason, same in by_reason.items():
            rows = [outcome.row for outcome in same if outcome.row is not None]
            if final:
                values = ended_values(QueueState.FAILED, reason, now, -claim.token)
            else:
                values = {
                    "queue_state": QueueState.READY,
                    "queue_run_at": now,
                    "queue_last_error": reason,
                    **UNCLAIMED,
                }
                values["queue_token"] = RUN_ALONE
            if not fenced(model, [row.pk for row in rows], claim).update(**values):
                continue
            write_attempts(
                model,
                claim.using,
                (
                    attempt_for(o.row, AttemptOutcome.LOST, now, o.attempt_error or reason)
                    for o in same
                    if o.row is not None
                ),
            )
            if final:
                extensions.tell_ended(model, claim.using, failed=rows)
            for row in rows:
                out.update(row, values)
                out.written.add(row.pk)
                if final:
                    out.announcements.append(_final_signal(QueueState.FAILED, row, reason))


def _hook_failed(
    model: type[QueueRow], claim: Claim, group: list[Outcome], now: datetime, out: Recorded
) -> None:
    """A job that committed and whose ``on_commit()`` hook then raised stays SUCCEEDED (its
    effects are in); the error is kept on it."""
    for outcome in group:
        text = f"succeeded, but an on_commit() hook raised afterwards:\n{outcome.reason}"
        done = rows_of(model, claim.using).filter(
            pk=outcome.pk, queue_token=-claim.token, queue_state=QueueState.SUCCEEDED
        )
        if done.update(queue_last_error=text):
            out.written.add(outcome.pk)
            if outcome.row is not None:
                out.update(outcome.row, {"queue_last_error": text})


_Writer = Callable[["type[QueueRow]", Claim, list[Outcome], datetime, Recorded], None]
_WRITERS: dict[End, _Writer] = {
    End.SUCCEEDED: _succeeded,
    End.FAILED: _failed,
    End.RETRIED_ALONE: _retried_alone,
    End.DEFERRED: _deferred,
    End.GIVEN_BACK: _given_back,
    End.CANCELLED: _ended,
    End.UNLOADABLE: _ended,
    End.EXPIRED: _expired,
    End.HOOK_FAILED: _hook_failed,
}


# -- shared parts --------------------------------------------------------------------------------


def ended_values(state: QueueState, reason: str, finished_at: Any, token: Any) -> dict[str, Any]:
    """The queue columns of a row that ended FAILED or CANCELLED without a retry: ``token``
    is the claim's negated token, so every final state keeps which claim ended it."""
    return {
        "queue_state": state,
        "queue_last_error": reason,
        "queue_finished_at": finished_at,
        "queue_token": token,
        "queue_locked_until": None,
    }


def _finish_ended(
    model: type[QueueRow],
    using: str,
    state: QueueState,
    held: list[QueueRow],
    reasons: list[tuple[QueueRow, str]],
    now: datetime,
) -> None:
    """The hooks and the attempt rows of rows just ended FAILED or CANCELLED."""
    if state is QueueState.FAILED:
        extensions.tell_ended(model, using, failed=held)
        outcome = AttemptOutcome.FAILED
    else:
        for answered in extensions.cancelled_in_claim:
            answered(model, using, [row.pk for row in held])
        extensions.tell_ended(model, using, cancelled=held)
        outcome = AttemptOutcome.CANCELLED
    write_attempts(model, using, (attempt_for(row, outcome, now, reason) for row, reason in reasons))


def _ended_by(model: type[QueueRow], claim: Claim, ids: Sequence[Any], state: QueueState) -> set[Any]:
    """The rows of ``ids`` that ``claim`` has already ended in ``state``."""
    rows = rows_of(model, claim.using).filter(pk__in=list(ids), queue_token=-claim.token, queue_state=state)
    return set(rows.values_list("pk", flat=True))


def _final_signal(state: QueueState, row: QueueRow, reason: str) -> tuple[Signal, dict[str, Any]]:
    if state is QueueState.FAILED:
        return signals.job_failed, {"row": row, "error": reason, "retry_at": None}
    return signals.job_cancelled, {"row": row, "reason": reason}


def _apply(row: QueueRow, values: dict[str, Any]) -> None:
    """Give the instance the values written (expressions excepted)."""
    for name, value in _plain(values):
        setattr(row, name, value)


def _plain(values: dict[str, Any]) -> list[tuple[str, Any]]:
    """The values written that an instance can take: expressions (``F() - 1``) excepted."""
    return [(name, value) for name, value in values.items() if not hasattr(value, "resolve_expression")]


#: Names of the signals, for the log line of a receiver that raised.
_SIGNAL_NAMES = {
    signals.job_succeeded: "job_succeeded",
    signals.job_failed: "job_failed",
    signals.job_cancelled: "job_cancelled",
}


def _announce(model: type[QueueRow], using: str, announcements: list[tuple[Signal, dict[str, Any]]]) -> None:
    """Send each end's signal once its transaction commits (at once outside one): a receiver
    that raises is logged, and neither the worker nor the other receivers are stopped by it."""
    # Asked once per signal, not once per row: a flush of 500 successes is one question.
    heard = {signal: signal.has_listeners(model) for signal in {signal for signal, _kwargs in announcements}}
    wanted = [(signal, kwargs) for signal, kwargs in announcements if heard[signal]]
    # The successes' counters (metrics) take the write's rows at once, not a signal per row.
    succeeded = (
        [kwargs["row"] for signal, kwargs in announcements if signal is signals.job_succeeded]
        if extensions.succeeded
        else []
    )
    if not wanted and not succeeded:
        return

    def send() -> None:
        if succeeded:
            _count_succeeded(model, succeeded)
        for signal, kwargs in wanted:
            announce(signal, model, **kwargs)

    transaction.on_commit(send, using=using)


def _count_succeeded(model: type[QueueRow], rows: list[QueueRow]) -> None:
    for count in extensions.succeeded:
        try:
            count(model, rows)
        except Exception:  # as a signal receiver's: logged, and the worker goes on
            logger.exception("counting %d successes of %s raised", len(rows), model._meta.label)


def announce(signal: Signal, model: type[QueueRow], **kwargs: Any) -> None:
    for _receiver, response in signal.send_robust(model, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of %s raised for %s pk=%s: %r",
                _SIGNAL_NAMES.get(signal, "a queue signal"),
                model._meta.label,
                kwargs["row"].pk,
                response,
                exc_info=response,
            )


def _rejected(model: type[QueueRow], outcome: Outcome, claim: Claim) -> None:
    logger.warning(
        "late outcome rejected: %s pk=%s %s on worker %s, but its lease was lost",
        model._meta.label,
        outcome.pk,
        outcome.end.value,
        claim.worker_id,
    )
    if signals.job_rejected.has_listeners(model):
        row = outcome.row
        if row is None:  # known by key only: an unsaved instance names it
            row = model()
            row.pk = outcome.pk
        signals.job_rejected.send_robust(model, row=row, outcome=outcome.end.value, worker_id=claim.worker_id)


def renew(model: type[QueueRow], ids: Sequence[Any], claim: Claim) -> set[Any]:
    """Extend the lease of the rows of ``ids`` still held; return their ids. (Not an end: the
    claim goes on; here because it is the other write of a claimed row's queue columns.)"""
    if not ids:
        return set()
    count = fenced(model, ids, claim).update(queue_locked_until=claim.now() + claim.lease)
    if count == len(ids):
        return set(ids)
    return set(fenced(model, ids, claim).values_list("pk", flat=True))


__all__ = [
    "Recorded",
    "announce",
    "ended_values",
    "fence_success",
    "record",
    "record_fenced_success",
    "renew",
]
