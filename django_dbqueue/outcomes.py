"""Every fenced write of queue columns: the one place an attempt's outcome is recorded.

The worker, the admin's "people as consumers" views, the ``django.tasks`` backend and the
instance methods of ``QueueMixin`` all end an attempt here. Each write names the claim's
token (``WHERE pk … AND queue_token = <token>``) and checks its row count, so a worker that
lost its claim never writes over the row's new holder: its late outcome is logged and
rejected (:class:`~django_dbqueue.exceptions.LeaseLost`).

A success stores the token negated and a retry or a release clears it, so only a live claim
carries a positive token: the token alone fences, and the statement stays on the primary
key (no lock on the state index that other workers' outcomes would wait for).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F
from django.dispatch import Signal

from . import cancellation, claims, composition, signals
from .backends import retry_on_lock_conflicts
from .claims import fenced, rows_of
from .exceptions import JobCancelled, LeaseLost, describe_error
from .history import ATTEMPT_FIELDS, AttemptOutcome, attempt_for, copy_attempts, write_attempts
from .leases import RUN_ALONE, Claim
from .retry import retry_at as decide_retry
from .states import QueueState

if TYPE_CHECKING:
    from .models import QueueMixin

logger = logging.getLogger("django_dbqueue.outcomes")

#: What a claim's outcome clears of the claim on the row.
_UNCLAIMED = {"queue_token": None, "queue_locked_by": None, "queue_locked_until": None}
_ENDED_FIELDS = (*ATTEMPT_FIELDS, *composition.FIELDS)  # its attempt row; in a composition?


def _rejected(row: QueueMixin, what: str, claim: Claim) -> None:
    logger.warning(
        "late outcome rejected: %s pk=%s %s on worker %s, but its lease was lost",
        row._meta.label,
        row.pk,
        what,
        claim.worker_id,
    )
    if signals.job_rejected.has_listeners(type(row)):
        signals.job_rejected.send_robust(type(row), row=row, outcome=what, worker_id=claim.worker_id)


#: Names of the signals ``announce`` sends, for its log line.
_SIGNAL_NAMES = {signals.job_succeeded: "job_succeeded", signals.job_failed: "job_failed"}


def announce(signal: Signal, model: type[QueueMixin], **kwargs: Any) -> None:
    """Send an outcome's signal once it is committed: a receiver that raises is logged, and
    neither the worker nor the other receivers are stopped by it."""
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


# -- success ---------------------------------------------------------------------------------


def succeed(model: type[QueueMixin], rows: Sequence[QueueMixin], claim: Claim) -> list[QueueMixin]:
    """Mark ``rows`` (all of ``claim``) SUCCEEDED in one UPDATE, with their attempt rows in
    the same transaction; return the rows whose claim was lost (nothing written for them)."""
    if not rows:
        return []
    finished_at = claim.now()

    def write() -> set[Any]:
        ids = [row.pk for row in rows]
        with transaction.atomic(using=claim.using, savepoint=False):
            count = fenced(model, ids, claim).update(
                queue_state=QueueState.SUCCEEDED,
                queue_token=-claim.token,
                queue_finished_at=finished_at,
                queue_locked_until=None,
                queue_last_error="",
            )
            if count == len(ids):
                written = set(ids)
            else:
                # The token negated is also what a cancellation leaves: the state tells.
                written = set(
                    rows_of(model, claim.using)
                    .filter(pk__in=ids, queue_token=-claim.token, queue_state=QueueState.SUCCEEDED)
                    .values_list("pk", flat=True)
                )
            copy_attempts(model, claim.using, ids, -claim.token, AttemptOutcome.SUCCEEDED, finished_at)
            composition.succeeded(model, claim.using, rows, written)  # batches, dependants
        return written

    written = retry_on_lock_conflicts(claim.using, write, "success")
    lost, won = [], []
    for row in rows:
        if row.pk not in written:
            _rejected(row, "succeeded", claim)
            lost.append(row)
            continue
        row.queue_state = QueueState.SUCCEEDED
        row.queue_token = -claim.token
        row.queue_finished_at = finished_at
        row.queue_locked_until = None
        row.queue_last_error = ""
        won.append(row)
    if won and signals.job_succeeded.has_listeners(model):

        def announce_won() -> None:
            for row in won:
                announce(signals.job_succeeded, model, row=row)

        transaction.on_commit(announce_won, using=claim.using)
    return lost


# -- failure -----------------------------------------------------------------------------------


def fail(row: QueueMixin, claim: Claim, error: BaseException | str, alone: bool = False) -> datetime | None:
    """Record a failed attempt of ``row`` with its reason, applying the retry policy: READY
    again at the returned time (claimed by itself, with ``alone``), or FAILED for good (None).
    Raises LeaseLost if the claim is gone (nothing written)."""
    model = type(row)
    if isinstance(error, JobCancelled):
        # Ended by the operator's request, not by the handler: no retry. The lease keeper
        # may have written it already (lease mode): then there is nothing more to do.
        ended = end_cancelled(model, [row], claim, str(error))
        if not ended and not claims.ended_cancelled(model, row.pk, claim):
            _rejected(row, "cancelled", claim)
            raise LeaseLost(f"{model._meta.label} pk={row.pk}: lease lost, cancellation not recorded")
        row.queue_state, row._queue_claim = QueueState.CANCELLED, None
        return None
    now = claim.now()
    retry_at = decide_retry(row.queue_retry_policy(), row.queue_attempts, error, now)
    text = describe_error(error)
    values: dict[str, Any] = {"queue_last_error": text, "queue_locked_until": None}
    if retry_at is None:
        values.update(queue_state=QueueState.FAILED, queue_finished_at=now, queue_token=-claim.token)
    else:
        values.update(queue_state=QueueState.READY, queue_run_at=retry_at, **_UNCLAIMED)
        if alone:
            values["queue_token"] = RUN_ALONE
    values.update(row.queue_failure_fields(error))
    outcome = AttemptOutcome.FAILED if retry_at is None else AttemptOutcome.RETRIED

    def write() -> int:
        with transaction.atomic(using=claim.using, savepoint=False):
            count = fenced(model, [row.pk], claim).update(**values)
            if count:
                write_attempts(model, claim.using, [attempt_for(row, outcome, now, text)])
                composition.finished(model, claim.using, failed=[row] if retry_at is None else [])
        return count

    if not retry_on_lock_conflicts(claim.using, write, "failure"):
        _rejected(row, "failed", claim)
        raise LeaseLost(f"{model._meta.label} pk={row.pk}: lease lost, failure not recorded")
    for name, value in values.items():
        setattr(row, name, value)
    if retry_at is None:
        row.queue_locked_by = claim.worker_id
    else:
        row._queue_claim = None
    transaction.on_commit(
        lambda: announce(signals.job_failed, model, row=row, error=error, retry_at=retry_at),
        using=claim.using,
    )
    return retry_at


def requeue_alone(row: QueueMixin, claim: Claim, error: BaseException | str) -> None:
    """Send ``row`` back READY, to be claimed by itself, whatever its retry policy says: one
    of the handlers run with it harmed the worker, and it may not have been this one."""
    now = claim.now()
    text = describe_error(error)
    with transaction.atomic(using=claim.using, savepoint=False):
        count = fenced(type(row), [row.pk], claim).update(
            queue_state=QueueState.READY,
            queue_run_at=now,
            queue_last_error=text,
            queue_token=RUN_ALONE,
            queue_locked_by=None,
            queue_locked_until=None,
        )
        if count:
            write_attempts(type(row), claim.using, [attempt_for(row, AttemptOutcome.RETRIED, now, text)])


def _end(model: type[QueueMixin], pk: Any, claim: Claim, state: QueueState, reason: str) -> bool:
    """End a claimed row in ``state`` with ``reason``, no retry; True if the claim held it."""
    return bool(
        fenced(model, [pk], claim).update(
            queue_state=state,
            queue_last_error=reason,
            queue_finished_at=claim.now(),
            queue_token=-claim.token,
            queue_locked_until=None,
        )
    )


def fail_by_key(model: type[QueueMixin], pk: Any, claim: Claim, reason: str) -> bool:
    """End a claimed row that cannot even be loaded (its data cannot become an instance)
    FAILED with ``reason``; no retry can help it. True if the claim still held it."""
    with transaction.atomic(using=claim.using, savepoint=False):
        if ended := _end(model, pk, claim, QueueState.FAILED, reason):
            composition.finished_keys(model, claim.using, [pk], composition.FAILED)
    return ended


# -- giving back, holding on ---------------------------------------------------------------------


def release(model: type[QueueMixin], ids: Sequence[Any], claim: Claim, alone: bool = False) -> int:
    """Give rows back unprocessed: READY again, the attempt their claim counted undone; with
    ``alone``, to be claimed one by one (one of them harmed the worker: see rescue.py)."""
    if not ids:
        return 0
    values: dict[str, Any] = {"queue_state": QueueState.READY, "queue_attempts": F("queue_attempts") - 1}
    values.update(_UNCLAIMED)
    if alone:
        values["queue_token"] = RUN_ALONE
    return retry_on_lock_conflicts(claim.using, lambda: fenced(model, ids, claim).update(**values), "release")


def defer(model: type[QueueMixin], pk: Any, claim: Claim, until: datetime) -> bool:
    """Give a row back to run again at ``until``, its attempt not counted."""
    return bool(
        fenced(model, [pk], claim).update(
            queue_state=QueueState.READY,
            queue_run_at=until,
            queue_attempts=F("queue_attempts") - 1,
            **_UNCLAIMED,
        )
    )


def end_cancelled(model: type[QueueMixin], rows: Sequence[Any], claim: Claim, why: str) -> set[Any]:
    """End claimed rows CANCELLED (an operator asked: see cancellation.py), their requests
    deleted and their attempts kept in the same transaction; return the ids written. Rows
    are instances or primary keys (the lease keeper knows only those)."""
    ids = [getattr(row, "pk", row) for row in rows]
    now = claim.now()

    def write() -> set[Any]:
        with transaction.atomic(using=claim.using, savepoint=False):
            # Locked first (SQLite: the transaction holds the only write lock), so the rows
            # read are the rows written, even racing the worker's own write of an outcome.
            held = list(fenced(model, ids, claim).select_for_update().only(*_ENDED_FIELDS))
            if not held:
                return set()
            fenced(model, [row.pk for row in held], claim).update(
                queue_state=QueueState.CANCELLED,
                queue_last_error=why,
                queue_finished_at=now,
                queue_token=-claim.token,
                queue_locked_until=None,
            )
            cancellation.forget(model, claim.using, [row.pk for row in held])
            composition.finished(model, claim.using, cancelled=held)
            attempts = (attempt_for(row, AttemptOutcome.CANCELLED, now, why) for row in held)
            write_attempts(model, claim.using, attempts)
        return {row.pk for row in held}

    return retry_on_lock_conflicts(claim.using, write, "cancel")


def renew(model: type[QueueMixin], ids: Sequence[Any], claim: Claim) -> set[Any]:
    """Extend the lease of the rows of ``ids`` still held; return their ids."""
    if not ids:
        return set()
    count = fenced(model, ids, claim).update(queue_locked_until=claim.now() + claim.lease)
    if count == len(ids):
        return set(ids)
    return set(fenced(model, ids, claim).values_list("pk", flat=True))


def after_commit_error(row: QueueMixin, claim: Claim, error: BaseException) -> None:
    """A hook that ``process()`` registered with ``on_commit()`` raised after the job had
    committed: the job stays SUCCEEDED (its effects are in), and the error is kept on it."""
    text = f"succeeded, but an on_commit() hook raised afterwards:\n{describe_error(error)}"
    rows_of(type(row), claim.using).filter(pk=row.pk, queue_token=-claim.token).update(queue_last_error=text)
    row.queue_last_error = text


__all__ = [
    "after_commit_error",
    "defer",
    "describe_error",
    "end_cancelled",
    "fail",
    "fail_by_key",
    "release",
    "renew",
    "succeed",
]
