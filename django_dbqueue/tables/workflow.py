"""Durable workflows: the checkpoints of a row's steps and the events sent to it
(docs/howto/workflows.md).

A workflow row is any queue row whose handler is written as named steps
(:mod:`django_dbqueue.workflows`). Its checkpoints are keyed by the row (model label and
primary key, as the other tables of the app key rows of any model) and the step's name, so a
run that comes back after a crash, a sleep or a wait skips what is recorded here.
"""

from __future__ import annotations

from django.db import models


class WorkflowStep(models.Model):
    """One step of a workflow row: a step's result once it finished, or a sleep or a wait
    (written when the run first reaches it, finished when it is over)."""

    STEP, SLEEP, WAIT = "step", "sleep", "wait"
    KINDS = [(STEP, "step"), (SLEEP, "sleep"), (WAIT, "wait for an event")]

    model = models.CharField(max_length=100)
    object_pk = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=KINDS, default=STEP)
    #: 1, 2, 3... in the order the run reached them: "fork from step N" keeps those before N.
    position = models.PositiveIntegerField()
    #: What the step returned (JSON), or the data of the event the wait received.
    result = models.JSONField(null=True, blank=True)
    #: A wait: the event's name.
    event = models.CharField(max_length=200, blank=True, default="")
    #: A sleep: when it wakes; a wait: its deadline (None: it waits as long as it takes).
    wake_at = models.DateTimeField(null=True, blank=True)
    #: A wait that reached its deadline first (its ``wait_for()`` raises ``WaitTimeout``).
    timed_out = models.BooleanField(default=False)
    #: The database's clock (from the claim) when the run reached it, and when it ended
    #: (None: a wait not over yet).
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "django_dbqueue"
        constraints = [
            models.UniqueConstraint(fields=["model", "object_pk", "name"], name="dbqueue_workflowstep_key")
        ]
        # A row's own steps are found through the unique key; this one serves the dashboard's
        # counts of a model's sleeping and waiting rows.
        indexes = [models.Index(fields=["model", "kind", "finished_at"], name="dbqueue_workflow_kind")]

    def __str__(self) -> str:
        return f"{self.model} pk={self.object_pk} {self.kind} {self.name!r}"


class WorkflowEvent(models.Model):
    """An event sent to a workflow row and not received yet: the first ``wait_for()`` of its
    name takes it (deleted in the transaction that checkpoints the wait)."""

    model = models.CharField(max_length=100)
    object_pk = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    data = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField()

    class Meta:
        app_label = "django_dbqueue"
        indexes = [models.Index(fields=["model", "object_pk", "name"], name="dbqueue_workflow_event")]

    def __str__(self) -> str:
        return f"{self.name!r} for {self.model} pk={self.object_pk}"


class WorkflowProgress(models.Model):
    """How far a workflow row's run says it is (``wf.progress()``): one row per workflow row,
    kept across runs and retries (each run overwrites it as it goes)."""

    model = models.CharField(max_length=100)
    object_pk = models.CharField(max_length=64)
    #: 0.0 to 1.0.
    fraction = models.FloatField(default=0)
    message = models.CharField(max_length=255, blank=True, default="")
    #: The database's clock (from the claim) at the write.
    updated_at = models.DateTimeField()

    class Meta:
        app_label = "django_dbqueue"
        verbose_name_plural = "workflow progress"
        constraints = [
            models.UniqueConstraint(fields=["model", "object_pk"], name="dbqueue_workflowprogress_key")
        ]

    def __str__(self) -> str:
        return f"{self.model} pk={self.object_pk}: {self.fraction:.0%} {self.message}".rstrip()
