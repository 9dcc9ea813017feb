"""The rescue: RUNNING rows whose lease ran out go back to READY (or FAILED when their
attempts are used up), by a periodic, bounded statement that any worker runs.

Bounded (``DBQUEUE_RESCUE_LIMIT`` rows) and ``SKIP LOCKED``: a row whose worker still holds
its row lock (atomic mode) is passed by, so a live claim is never taken away.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.db import transaction

from .backends import DbNow, aware, retry_on_lock_conflicts
from .conf import settings
from .history import AttemptOutcome, attempt_for, write_attempts
from .states import QueueState

if TYPE_CHECKING:
    from .models import QueueMixin

logger = logging.getLogger("django_dbqueue.rescue")

#: What the rescue reads of an expired row: enough for its attempt row and its retry policy.
RESCUE_FIELDS = (
    "pk",
    "queue_attempts",
    "queue_locked_by",
    "queue_enqueued_at",
    "queue_run_at",
    "queue_last_attempt_at",
)
_UNCLAIMED = {"queue_token": None, "queue_locked_by": None, "queue_locked_until": None}


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
        dead = {row.pk for row in expired if attempts_used_up(row)}
        if back := [row.pk for row in expired if row.pk not in dead]:
            rows.filter(pk__in=back).update(
                queue_state=QueueState.READY,
                queue_run_at=DbNow(),
                queue_last_error="lease expired: the worker stopped renewing its claim "
                "(crashed, killed or hung); running it again",
                **_UNCLAIMED,
            )
        if dead:
            rows.filter(pk__in=list(dead)).update(
                queue_state=QueueState.FAILED,
                queue_finished_at=DbNow(),
                queue_last_error="lease expired on the last allowed attempt; "
                "the worker stopped renewing its claim",
                **_UNCLAIMED,
            )
        write_attempts(
            model,
            using,
            (
                attempt_for(row, AttemptOutcome.LOST, aware(row.dbqueue_now), "lease expired")
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
            " -> FAILED" if row.pk in dead else "",
        )
    return len(expired)
