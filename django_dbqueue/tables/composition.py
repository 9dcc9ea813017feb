"""Batches and dependencies: the rows that make queue jobs a composition (docs/composition.md).

A member job names its batch in ``queue_batch`` and says it has dependants in
``queue_dependants`` (columns of ``QueueMixin``), so the outcome of a job in no composition
costs no statement: the check is on the loaded row. The counters below are changed in the
transaction of each member's fenced outcome (see :mod:`django_dbqueue.composition.hooks`).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import models, router, transaction
from django.utils import timezone

from ..backends import DbNow


class Batch(models.Model):
    """A set of jobs enqueued together, with callbacks fired once when they finish."""

    description = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    #: Members, counted when the batch's ``with`` block closed.
    total = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    #: Model labels of the members (where ``cancel()`` looks).
    member_models = models.JSONField(default=list, blank=True)
    #: ``{"success"|"complete"|"failure": callback}``: see batches.describe_callback.
    callbacks = models.JSONField(default=dict, blank=True)
    success_fired_at = models.DateTimeField(null=True, blank=True)
    complete_fired_at = models.DateTimeField(null=True, blank=True)
    failure_fired_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "django_dbqueue"
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return f"batch {self.pk}" + (f" ({self.description})" if self.description else "")

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    def progress(self) -> dict[str, Any]:
        """Counters read from the database now: total, succeeded, failed, cancelled, pending."""
        self.refresh_from_db(fields=["total", "succeeded", "failed", "cancelled", "cancelled_at"])
        return {
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "pending": max(self.total - self.finished, 0),
            "done": self.finished >= self.total,
        }

    def cancel(self) -> int:
        """Cancel the members that have not started; RUNNING ones finish (their outcomes are
        counted), so ``on_complete`` fires once the last of them ends. Returns how many."""
        using = self._state.db or router.db_for_write(type(self))
        cancelled = 0
        with transaction.atomic(using=using):
            batches = type(self)._base_manager.using(using)
            batches.filter(pk=self.pk, cancelled_at__isnull=True).update(cancelled_at=DbNow())
            for label in self.member_models:
                # The members' own queue QuerySet cancels them (and tells their dependants).
                rows = apps.get_model(label).queue_queryset(using).filter(queue_batch=self.pk)
                cancelled += rows.cancel()
        return cancelled


class JobWait(models.Model):
    """A job that waits for its parents: it is IDLE until ``pending`` reaches 0."""

    CANCEL, RUN = "cancel", "run"
    POLICIES = [(CANCEL, "cancel the dependant"), (RUN, "run the dependant anyway")]

    model = models.CharField(max_length=100)
    object_pk = models.CharField(max_length=64)
    pending = models.PositiveIntegerField(default=0)
    on_parent_failure = models.CharField(max_length=8, choices=POLICIES, default=CANCEL)
    created_at = models.DateTimeField(default=timezone.now)
    promoted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "django_dbqueue"
        constraints = [models.UniqueConstraint(fields=["model", "object_pk"], name="dbqueue_jobwait_job")]

    def __str__(self) -> str:
        return f"{self.model} pk={self.object_pk} waits for {self.pending}"


class JobDependency(models.Model):
    """One edge: ``wait``'s job runs after the job (``parent_model``, ``parent_pk``)."""

    wait = models.ForeignKey(JobWait, on_delete=models.CASCADE, related_name="edges")
    parent_model = models.CharField(max_length=100)
    parent_pk = models.CharField(max_length=64)
    #: Set once the parent's outcome has been counted for ``wait`` (never counted twice).
    settled = models.BooleanField(default=False)

    class Meta:
        app_label = "django_dbqueue"
        verbose_name_plural = "job dependencies"
        indexes = [models.Index(fields=["parent_model", "parent_pk"], name="dbqueue_dep_parent")]

    def __str__(self) -> str:
        return f"{self.parent_model} pk={self.parent_pk} -> {self.wait}"
