"""``Schedule`` (a recurring job) and ``ScheduleFiring`` (the ledger: one row per fired slot).

The ledger's unique key on (schedule, slot) is what makes a slot fire once across any number
of ``runqueue`` hosts: the firing row and the job it enqueues are inserted in one
transaction, so a host that loses the race (IntegrityError) rolls its job back with it.
"""

from __future__ import annotations

from datetime import datetime

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from ..schedules.slots import CatchUp, Timing

#: Fields the admin may override; a code declaration no longer sets them once overridden.
OVERRIDABLE = ("enabled", "cron", "every", "timezone")


class Schedule(models.Model):
    """A recurring job: when (a cron line or an interval, in a time zone) and what (a target).

    ``next_due`` is the next slot to fire, on the database clock; the firing tick of
    ``runqueue`` asks for ``enabled`` rows with ``next_due <= now`` (one indexed query)."""

    name = models.CharField(max_length=100, unique=True)
    cron = models.CharField(
        max_length=200, blank=True, default="", help_text="A cron line (5 fields, or 6 with seconds first)."
    )
    every = models.PositiveIntegerField(
        null=True, blank=True, help_text="Or an interval in seconds (slots aligned on the Unix epoch)."
    )
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA name; for cron lines.")
    catch_up = models.CharField(
        max_length=8, choices=[(c.value, c.value) for c in CatchUp], default=CatchUp.LATEST.value
    )
    catch_up_limit = models.PositiveIntegerField(
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="Most missed slots 'all' fires (1 to 10,000).",
    )
    enabled = models.BooleanField(default=True)
    #: ``task:<module path>``, ``message:<kind>`` or ``model:<app_label.Model>``.
    target = models.CharField(max_length=255)
    #: task: ``{"args": [...], "kwargs": {...}}``; message: ``{"payload": ..., "queue": ...}``;
    #: model: ``{"fields": {...}}``.
    arguments = models.JSONField(default=dict, blank=True)
    priority = models.IntegerField(default=0)
    #: Declared in code (the ``@schedule`` decorator or ``DBQUEUE_SCHEDULES``), as last synced.
    in_code = models.BooleanField(default=False)
    declared = models.JSONField(default=dict, blank=True, editable=False)
    #: Fields an admin edit set (from OVERRIDABLE): code no longer changes them.
    overrides = models.JSONField(default=list, blank=True, editable=False)
    last_slot = models.DateTimeField(null=True, blank=True, editable=False)
    next_due = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, default="", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "django_dbqueue"
        indexes = [models.Index(fields=["enabled", "next_due"], name="dbqueue_schedule_due")]

    def __str__(self) -> str:
        return self.name

    def timing(self) -> Timing:
        """The validated timing (InvalidSchedule if a row was edited into nonsense)."""
        return Timing(cron=self.cron, every=self.every, timezone=self.timezone)

    def restart_from(self, now: datetime) -> None:
        """Due at the first slot after ``now``: what an edit, an enable or a creation does
        (the slots before it are not caught up)."""
        self.next_due = self.timing().next_after(now)


class ScheduleFiring(models.Model):
    """One fired slot of a schedule, and the job it enqueued (the same transaction)."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="firings")
    slot = models.DateTimeField()
    #: "Run now" from the admin (its slot is the database's time of the click).
    manual = models.BooleanField(default=False)
    fired_at = models.DateTimeField()
    fired_by = models.CharField(max_length=255, blank=True, default="")
    #: ``app_label.Model:pk`` of the enqueued row.
    job = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        app_label = "django_dbqueue"
        constraints = [models.UniqueConstraint(fields=["schedule", "slot"], name="dbqueue_firing_once")]
        indexes = [models.Index(fields=["fired_at"], name="dbqueue_firing_fired")]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.slot:%Y-%m-%d %H:%M:%S}"
