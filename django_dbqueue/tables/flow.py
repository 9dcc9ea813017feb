"""The tables of flow control (issue #22): paused queues, and one slot row per limited key.

Both are small and live in the queue's own database: every worker host reads the same rows,
so a pause or a limit holds across hosts with no broker and no leader.
"""

from __future__ import annotations

from django.db import models


class QueuePause(models.Model):
    """A paused queue: a whole model (``queue`` empty), or one named queue of a model with a
    ``queue`` column (``Message``, ``TaskRecord``). Workers claim nothing from it until the
    row is deleted (``resume``); running jobs finish."""

    model = models.CharField(max_length=200, help_text="The queue model's label, e.g. shop.Order.")
    queue = models.CharField(
        max_length=64, blank=True, default="", help_text="Empty: every row of the model."
    )
    paused_at = models.DateTimeField(auto_now_add=True)
    paused_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        app_label = "django_dbqueue"
        verbose_name = "paused queue"
        constraints = [models.UniqueConstraint(fields=["model", "queue"], name="dbqueue_pause_unique")]

    def __str__(self) -> str:
        return f"{self.model}:{self.queue}" if self.queue else self.model


class QueueKeySlot(models.Model):
    """One row per (model, key) of a model that declares limits.

    A claim locks the slots of the keys it admits (``FOR UPDATE SKIP LOCKED``): two claimers
    never decide on the same key at once, and neither waits for the other. The row also
    holds the key's current rate window (start on the database clock, claims so far)."""

    model = models.CharField(max_length=200)
    #: A digest of the key's text: fixed length, and one slot per key on a case-insensitive
    #: collation too (MySQL's default), where the text itself could collide.
    key = models.CharField(max_length=32)
    value = models.CharField(max_length=255, help_text="The key's text (for people, and to skip full keys).")
    window_start = models.DateTimeField(null=True, blank=True)
    window_count = models.PositiveIntegerField(default=0)

    class Meta:
        app_label = "django_dbqueue"
        constraints = [models.UniqueConstraint(fields=["model", "key"], name="dbqueue_keyslot_unique")]
        # A claim's rate pre-filter reads the keys whose window is still open: a range of
        # recent window starts, not every key the model ever had.
        indexes = [models.Index(fields=["model", "window_start"], name="dbqueue_keyslot_window")]

    def __str__(self) -> str:
        return f"{self.model}[{self.value}]"
