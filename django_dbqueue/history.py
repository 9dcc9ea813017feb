"""The attempt history: one ``QueueAttempt`` row per attempt of every queue row.

Written by the outcomes module in the same transaction as the outcome it describes (one
``bulk_create`` per batch of outcomes), so history and queue state never disagree. Turn it
off with ``DBQUEUE_HISTORY = False`` or per model with ``queue_history = False``; prune it
with ``manage.py purgequeue --attempts-older-than``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models

from .conf import settings

if TYPE_CHECKING:
    from .models import QueueAttempt, QueueMixin

#: Error text kept per attempt (the full traceback stays on the row's queue_last_error).
HISTORY_ERROR_LENGTH = 4000


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    RETRIED = "retried", "Failed, retried later"
    FAILED = "failed", "Failed for good"
    LOST = "lost", "Lease expired (worker lost)"


def history_enabled(model: type[QueueMixin]) -> bool:
    own = getattr(model, "queue_history", None)
    return settings.HISTORY if own is None else bool(own)


def attempt_model() -> type[QueueAttempt]:
    # Looked up, not imported: the history model lives in models/, which sits above this
    # module (the queue mixin there declares a manager built on query.py and outcomes.py).
    return apps.get_model("django_dbqueue", "QueueAttempt")


def attempt_for(
    row: QueueMixin,
    outcome: str,
    finished_at: datetime,
    error: str = "",
    worker_id: str = "",
    attempt: int | None = None,
) -> dict[str, Any]:
    """The field values of the QueueAttempt row of ``row``'s current attempt."""
    return {
        "model": row._meta.label,
        "object_id": str(row.pk),
        "attempt": row.queue_attempts if attempt is None else attempt,
        "worker_id": worker_id or row.queue_locked_by or "",
        "enqueued_at": row.queue_enqueued_at,
        "due_at": row.queue_run_at,
        "claimed_at": row.queue_last_attempt_at,
        "finished_at": finished_at,
        "outcome": outcome,
        "error": error[-HISTORY_ERROR_LENGTH:],
    }


def write_attempts(model: type[QueueMixin], using: str, attempts: Iterable[dict[str, Any]]) -> None:
    """Append attempt rows in the current transaction, in one INSERT per 500."""
    if not history_enabled(model):
        return
    attempt = attempt_model()
    rows = [attempt(**values) for values in attempts]
    if rows:
        attempt._default_manager.using(using).bulk_create(rows, batch_size=500)
