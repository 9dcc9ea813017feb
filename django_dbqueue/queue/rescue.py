"""The rescue: RUNNING rows whose lease ran out (their worker crashed, was killed or hung) go
back to READY, by a periodic, bounded statement that any worker runs.

Bounded (``DBQUEUE_RESCUE_LIMIT`` rows) and ``SKIP LOCKED``: a row whose worker still holds
its row lock (atomic mode) is passed by, so a live claim is never taken away.

Who pays for a crash: a worker dies in one handler, but its claim held a whole batch. So rows
of a claim that expired together go back READY whatever their attempts (the lost attempt keeps
its number, so each run of a row has its own), marked to run alone (``RUN_ALONE``); a row that
expired alone in its claim was the one running, and ends FAILED when its attempts are used up.
A row that kills its worker every time therefore fails by itself, and the rows claimed with it
run on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import transaction

from .. import signals
from ..backends import DbNow, aware, retry_on_lock_conflicts
from ..conf import settings
from ..states import QueueState
from . import extensions
from .history import ATTEMPT_FIELDS
from .lease import Claim
from .outcome import End, Outcome
from .record import record
from .row import COMPOSITION_FIELDS

if TYPE_CHECKING:
    from .row import QueueRow

logger = logging.getLogger("django_dbqueue.rescue")

#: What the rescue reads of an expired row: enough for its attempt row and its retry policy.
RESCUE_FIELDS = (*ATTEMPT_FIELDS, "queue_token", *COMPOSITION_FIELDS)


SPARED = (
    "lease expired with other rows of its claim (the worker crashed, was killed or hung in one of "
    "them): it runs again alone"
)
CHARGED = "lease expired while it ran alone: the worker crashed, was killed or hung in its handler"
DEAD = f"{CHARGED}, on the last allowed attempt"


class Reasons(NamedTuple):
    """What the rows put back are told: the spared rows of a claim, the charged one, the charged
    one on its last attempt, and each row's attempt."""

    spared: str
    charged: str
    dead: str
    attempt: str | None  # None: the row's own reason
    why: str  # for the log


LEASE_EXPIRED = Reasons(SPARED, CHARGED, DEAD, "lease expired", "after its lease expired")


def crash_reasons(cause: str) -> Reasons:
    """The reasons for the rows of a worker that died, ``cause`` saying how ("worker process
    killed by SIGSEGV"): its supervisor knows, so nobody has to guess from an expired lease."""
    charged = f"{cause} while running this job"
    return Reasons(
        f"{cause} while running a row of its claim: it runs again alone",
        charged,
        f"{charged}, on the last allowed attempt",
        None,
        f"({cause})",
    )


def attempts_used_up(row: QueueRow) -> bool:
    most = row.queue_retry_policy().max_attempts
    return most is not None and row.queue_attempts >= most


def rescue_expired(model: type[QueueRow], using: str, limit: int | None = None) -> int:
    """Rescue up to ``limit`` rows of ``model`` whose lease ran out; return how many."""
    return retry_on_lock_conflicts(
        using, lambda: _rescue(model, using, limit or settings.RESCUE_LIMIT), "rescue"
    )


def _rescue(model: type[QueueRow], using: str, limit: int) -> int:
    with transaction.atomic(using=using):
        expired = list(
            _lockable(model, using).filter(queue_state=QueueState.RUNNING, queue_locked_until__lt=DbNow())[
                :limit
            ]
        )
        if not expired:
            return 0
        holders = {row.pk: row.queue_locked_by for row in expired}
        ended = _put_back(model, using, expired, LEASE_EXPIRED)
    _after(model, expired, holders, ended, LEASE_EXPIRED)
    return len(expired)


def rescue_claim(model: type[QueueRow], using: str, token: int, cause: str) -> int:
    """Put back now the rows a dead worker's claim ``token`` still holds (its supervisor saw it
    die), as the rescue does after their lease, with ``cause`` in their reasons; return how many.
    A row some session still locks is skipped: its lease brings it back."""

    def put_back() -> int:
        reasons = crash_reasons(cause)
        with transaction.atomic(using=using):
            held = list(_lockable(model, using).filter(queue_state=QueueState.RUNNING, queue_token=token))
            if not held:
                return 0
            holders = {row.pk: row.queue_locked_by for row in held}
            ended = _put_back(model, using, held, reasons)
        _after(model, held, holders, ended, reasons)
        return len(held)

    return retry_on_lock_conflicts(using, put_back, "rescue")


def _lockable(model: type[QueueRow], using: str) -> Any:
    return (
        model._base_manager.using(using)
        .order_by()
        .select_for_update(skip_locked=True)
        .annotate(dbqueue_now=DbNow())
        .only(*RESCUE_FIELDS)
    )


def _put_back(
    model: type[QueueRow], using: str, expired: list[QueueRow], reasons: Reasons
) -> tuple[set[Any], set[Any]]:
    """Inside the caller's transaction: each claim's rows READY again (or FAILED, CANCELLED),
    written by ``record()`` as that claim's outcomes (the rescue holds their row locks, and
    their token is still the claim's); return the pks that ended FAILED and those that ended
    CANCELLED."""
    # The database's clock, read by the SELECT: the time of every end written here.
    now = aware(expired[0].dbqueue_now)  # type: ignore[attr-defined]  # the annotation of _lockable()
    # A row someone asked to cancel ends CANCELLED rather than running again.
    asked = _cancel_requests(model, using, [(row.pk, row.queue_token) for row in expired])
    per_claim: dict[int, list[QueueRow]] = {}
    for row in expired:
        per_claim.setdefault(row.queue_token or 0, []).append(row)
    dead: set[Any] = set()
    for token, rows in per_claim.items():
        claim = Claim(token, rows[0].queue_locked_by or "", model.queue_lease_seconds(), using, now)
        decided = [_outcome(row, len(rows) > 1, asked, reasons) for row in rows]
        dead |= {outcome.pk for outcome in decided if outcome.end is End.EXPIRED and outcome.final}
        record(model, claim, decided)
    return dead, set(asked)


def _outcome(row: QueueRow, spared: bool, asked: dict[Any, str], reasons: Reasons) -> Outcome:
    """What the rescue decides for one expired row: cancelled if asked; READY alone if it
    expired with other rows of its claim (spared) or has attempts left (charged); FAILED if it
    expired alone on its last allowed attempt (dead)."""
    if row.pk in asked:
        return Outcome.cancelled(row, _cancelled_reason(asked[row.pk]))
    if spared:
        return Outcome.expired(row, reasons.spared, final=False, attempt_error=reasons.attempt)
    if attempts_used_up(row):
        return Outcome.expired(row, reasons.dead, final=True, attempt_error=reasons.attempt)
    return Outcome.expired(row, reasons.charged, final=False, attempt_error=reasons.attempt)


def _after(
    model: type[QueueRow],
    expired: list[QueueRow],
    holders: dict[Any, str | None],
    ended: tuple[set[Any], set[Any]],
    reasons: Reasons,
) -> None:
    """After the commit: a log line per row (naming the worker that held it), and the signal."""
    dead, asked = ended
    for row in expired:
        logger.warning(
            "rescued %s pk=%s from worker %s %s (attempt %s)%s",
            model._meta.label,
            row.pk,
            holders[row.pk],
            reasons.why,
            row.queue_attempts,
            " -> FAILED" if row.pk in dead else " -> CANCELLED" if row.pk in asked else "",
        )
    if signals.job_rescued.has_listeners(model):
        signals.job_rescued.send_robust(model, count=len(expired), failed=len(dead))


def _cancel_requests(model: type[QueueRow], using: str, rows: list[tuple[Any, Any]]) -> dict[Any, str]:
    """Of the expired ``rows`` (pk, token), those someone asked to cancel during that claim:
    pk -> the reason (cancellation's, through :mod:`~django_dbqueue.queue.extensions`)."""
    asked: dict[Any, str] = {}
    for requests in extensions.cancel_requests:
        asked.update(requests(model, using, rows))
    return asked


def _cancelled_reason(reason: str) -> str:
    return f"{reason}; its worker was gone (lease expired)"
