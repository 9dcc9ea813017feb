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
from collections import Counter
from typing import TYPE_CHECKING, Any

from django.db import transaction

from . import cancellation, composition, signals
from .backends import DbNow, aware, retry_on_lock_conflicts
from .conf import settings
from .history import ATTEMPT_FIELDS, AttemptOutcome, attempt_for, write_attempts
from .leases import RUN_ALONE
from .states import QueueState

if TYPE_CHECKING:
    from .models import QueueMixin

logger = logging.getLogger("django_dbqueue.rescue")

#: What the rescue reads of an expired row: enough for its attempt row and its retry policy.
RESCUE_FIELDS = (*ATTEMPT_FIELDS, "queue_token", *composition.FIELDS)


SPARED = (
    "lease expired with other rows of its claim (the worker crashed, was killed or hung in one of "
    "them): it runs again alone"
)
CHARGED = "lease expired while it ran alone: the worker crashed, was killed or hung in its handler"
DEAD = f"{CHARGED}, on the last allowed attempt"


def attempts_used_up(row: QueueMixin) -> bool:
    most = row.queue_retry_policy().max_attempts
    return most is not None and row.queue_attempts >= most


def rescue_expired(model: type[QueueMixin], using: str, limit: int | None = None) -> int:
    """Rescue up to ``limit`` rows of ``model`` whose lease ran out; return how many."""
    return retry_on_lock_conflicts(
        using, lambda: _rescue(model, using, limit or settings.RESCUE_LIMIT), "rescue"
    )


def _rescue(model: type[QueueMixin], using: str, limit: int) -> int:
    rows = model._base_manager.using(using)
    with transaction.atomic(using=using):
        expired = list(
            rows.filter(queue_state=QueueState.RUNNING, queue_locked_until__lt=DbNow())
            .order_by()
            .select_for_update(skip_locked=True)
            .annotate(dbqueue_now=DbNow())
            .only(*RESCUE_FIELDS)[:limit]
        )
        if not expired:
            return 0
        # A row someone asked to cancel ends CANCELLED rather than running again.
        asked = cancellation.requested_of(model, using, [(row.pk, row.queue_token) for row in expired])
        if asked:
            _cancel(model, using, asked)
        claims = Counter(row.queue_token for row in expired)
        charged = [row for row in expired if claims[row.queue_token] == 1 and row.pk not in asked]
        dead = {row.pk for row in charged if attempts_used_up(row)}
        alone = {"queue_token": RUN_ALONE, "queue_locked_by": None, "queue_locked_until": None}
        if spared := [row.pk for row in expired if claims[row.queue_token] > 1 and row.pk not in asked]:
            rows.filter(pk__in=spared).update(
                queue_state=QueueState.READY,
                queue_run_at=DbNow(),
                queue_last_error=SPARED,
                **alone,
            )
        if back := [row.pk for row in charged if row.pk not in dead]:
            rows.filter(pk__in=back).update(
                queue_state=QueueState.READY, queue_run_at=DbNow(), queue_last_error=CHARGED, **alone
            )
        if dead:
            rows.filter(pk__in=list(dead)).update(
                queue_state=QueueState.FAILED,
                queue_finished_at=DbNow(),
                queue_last_error=DEAD,
                queue_token=None,
                queue_locked_by=None,
                queue_locked_until=None,
            )
        composition.finished(
            model,
            using,
            failed=[r for r in expired if r.pk in dead],
            cancelled=[r for r in expired if r.pk in asked],
        )
        now = aware(expired[0].dbqueue_now)
        write_attempts(
            model,
            using,
            (
                attempt_for(row, AttemptOutcome.CANCELLED, now, cancellation.reason(asked[row.pk]))
                if row.pk in asked
                else attempt_for(row, AttemptOutcome.LOST, now, "lease expired")
                for row in expired
            ),
        )
    for row in expired:
        logger.warning(
            "rescued %s pk=%s from worker %s after its lease expired (attempt %s)%s",
            model._meta.label,
            row.pk,
            row.queue_locked_by,
            row.queue_attempts,
            " -> FAILED" if row.pk in dead else " -> CANCELLED" if row.pk in asked else "",
        )
    if signals.job_rescued.has_listeners(model):
        signals.job_rescued.send_robust(model, count=len(expired), failed=len(dead))
    return len(expired)


def _cancel(model: type[QueueMixin], using: str, asked: dict[Any, str]) -> None:
    """End expired rows whose cancellation was asked for: their worker is gone, so nobody
    else would (one UPDATE per requester, usually one)."""
    by_whom: dict[str, list[Any]] = {}
    for pk, requested_by in asked.items():
        by_whom.setdefault(requested_by, []).append(pk)
    for requested_by, ids in by_whom.items():
        model._base_manager.using(using).filter(pk__in=ids).update(
            queue_state=QueueState.CANCELLED,
            queue_finished_at=DbNow(),
            queue_last_error=f"{cancellation.reason(requested_by)}; its worker was gone (lease expired)",
            queue_token=None,
            queue_locked_by=None,
            queue_locked_until=None,
        )
    cancellation.forget(model, using, list(asked))
