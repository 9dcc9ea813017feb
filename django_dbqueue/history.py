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

from django.db import connections, models

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


#: The columns an attempt row is written with, in the order of ``attempt_for``'s tuple.
ATTEMPT_COLUMNS = (
    "model",
    "object_id",
    "attempt",
    "worker_id",
    "enqueued_at",
    "due_at",
    "claimed_at",
    "finished_at",
    "outcome",
    "error",
)
_DATETIMES = (4, 5, 6, 7)

AttemptRow = tuple[Any, ...]


def attempt_for(
    row: QueueMixin, outcome: str, finished_at: datetime, error: str = "", worker_id: str = ""
) -> AttemptRow:
    """The values of one QueueAttempt row (a plain tuple: a batch of them is written with one
    executemany, without building a model instance per attempt)."""
    claim = getattr(row, "_queue_claim", None)
    return (
        row._meta.label,
        str(row.pk),
        row.queue_attempts,
        worker_id or (claim.worker_id if claim else "") or "",
        row.queue_enqueued_at,
        row.queue_run_at,
        row.queue_last_attempt_at,
        finished_at,
        outcome,
        error[-HISTORY_ERROR_LENGTH:],
    )


def write_attempts(model: type[QueueMixin], using: str, attempts: Iterable[AttemptRow]) -> None:
    """Append attempt rows in the current transaction: one multi-row INSERT, no ids asked back.

    Parameters only, through the backend's own datetime adaptation; this path is the hot one
    of every batch outcome, so it skips the ORM's per-field machinery."""
    if not history_enabled(model):
        return
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = []
    for values in attempts:
        row = list(values)
        for index in _DATETIMES:
            row[index] = adapt(row[index])
        rows.append(row)
    if not rows:
        return
    quote = connection.ops.quote_name
    columns = ", ".join(quote(name) for name in ATTEMPT_COLUMNS)
    placeholders = ", ".join(["%s"] * len(ATTEMPT_COLUMNS))
    sql = f"INSERT INTO {quote(QueueAttempt._meta.db_table)} ({columns}) VALUES ({placeholders})"
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
