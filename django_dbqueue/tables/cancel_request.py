"""``CancelRequest``: an operator's request to cancel a RUNNING row, for the worker holding it.

Kept in a table of its own rather than on the queue row: in atomic mode the worker holds the
row's lock for as long as the handler runs, so writing a flag on the row would wait for the
very handler it means to stop. A request names the claim (its token), so it can only ever
stop the attempt that was running when it was made.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class CancelRequest(models.Model):
    model = models.CharField(max_length=100, help_text="The queue model's label, e.g. shop.Order.")
    object_id = models.CharField(max_length=64)
    token = models.BigIntegerField(help_text="The claim the request is for (queue_token).")
    requested_at = models.DateTimeField(default=timezone.now)
    requested_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        app_label = "django_dbqueue"
        constraints = [
            # One request per row: a request for an older claim of the row is replaced.
            models.UniqueConstraint(fields=["model", "object_id"], name="dbqueue_one_cancel_per_row")
        ]
        indexes = [models.Index(fields=["token"], name="dbqueue_cancel_token")]

    def __str__(self) -> str:
        return f"cancel {self.model} {self.object_id} (claim {self.token})"
