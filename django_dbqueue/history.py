"""``QueueAttempt``: an append-only record of every attempt of every queue row.

Written in the same transaction as the outcome it describes (one bulk INSERT per batch of
outcomes), so history and queue state never disagree. Turn it off with
``DBQUEUE_HISTORY = False`` or per model with ``queue_history = False``; prune it with
``manage.py purgequeue --attempts-older-than``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models

from .conf import settings

if TYPE_CHECKING:
    from .models import QueueMixin

#: Error text kept per attempt (the full traceback stays on the row's queue_last_error).
HISTORY_ERROR_LENGTH = 4000


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    RETRIED = "retried", "Failed, retried later"
    FAILED = "failed", "Failed for good"
    LOST = "lost", "Lease expired (worker lost)"


class QueueAttempt(models.Model):
    model = models.CharField(max_length=100, help_text="The queue model's label, e.g. shop.Order.")
    object_id = models.CharField(max_length=64)
    attempt = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=255, blank=True, default="")
    enqueued_at = models.DateTimeField(null=True)
    due_at = models.DateTimeField(null=True, help_text="queue_run_at when the row was claimed.")
    claimed_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["model", "object_id"], name="dbqueue_attempt_row"),
            models.Index(fields=["finished_at"], name="dbqueue_attempt_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.object_id} attempt {self.attempt}: {self.outcome}"


def history_enabled(model: type[QueueMixin]) -> bool:
    own = getattr(model, "queue_history", None)
    return settings.HISTORY if own is None else bool(own)


def attempt_for(
    row: QueueMixin, outcome: str, finished_at: datetime, error: str = "", worker_id: str = ""
) -> QueueAttempt:
    claim = getattr(row, "_queue_claim", None)
    return QueueAttempt(
        model=row._meta.label,
        object_id=str(row.pk),
        attempt=row.queue_attempts,
        worker_id=worker_id or (claim.worker_id if claim else "") or "",
        enqueued_at=row.queue_enqueued_at,
        due_at=row.queue_run_at,
        claimed_at=row.queue_last_attempt_at,
        finished_at=finished_at,
        outcome=outcome,
        error=error[-HISTORY_ERROR_LENGTH:],
    )


def write_attempts(model: type[QueueMixin], using: str, attempts: Iterable[QueueAttempt]) -> None:
    if not history_enabled(model):
        return
    items: list[Any] = list(attempts)
    if items:
        # One multi-row INSERT without RETURNING: nobody needs the new ids, and bulk_create
        # would ask MariaDB/PostgreSQL to send them all back (it doubled the cost here).
        QueueAttempt.objects.using(using)._insert(items, fields=_insert_fields(), using=using)


def _insert_fields() -> list[models.Field]:
    return [f for f in QueueAttempt._meta.concrete_fields if not f.primary_key]
