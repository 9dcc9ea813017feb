"""``QueueAttempt``: an append-only record of every attempt of every queue row (written by
:mod:`django_dbqueue.queue.history` through the outcomes)."""

from __future__ import annotations

from django.db import models

from ..states import AttemptOutcome


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
        app_label = "django_dbqueue"
        indexes = [
            # One row's history (model and object id), and the admin's search by an object id
            # alone: object_id leads, so both read the index (an index led by the model served
            # only the first, and the search read every attempt).
            models.Index(fields=["object_id", "model"], name="dbqueue_attempt_object"),
            # The admin's search by a worker id (or a person's, for taken items).
            models.Index(fields=["worker_id"], name="dbqueue_attempt_worker"),
            models.Index(fields=["finished_at"], name="dbqueue_attempt_finished"),
            # The dashboard's charts: one model's last hour or day, bucketed by time and
            # outcome, read from this index alone (the latencies need the two other times).
            models.Index(
                fields=["model", "finished_at", "outcome", "claimed_at", "due_at"],
                name="dbqueue_attempt_timeline",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.object_id} attempt {self.attempt}: {self.outcome}"
