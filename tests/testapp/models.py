"""Concrete queue models the tests drive: their handlers do what their fields say."""

from __future__ import annotations

import os
import time

from django.db import models

from django_dbqueue.exceptions import Discard
from django_dbqueue.models import QueueMixin
from django_dbqueue.query import QueueQuerySetMixin
from django_dbqueue.retry import ExponentialBackoff


class Ledger(models.Model):
    """One row per handler run: lets tests count how often each queue row ran."""

    kind = models.CharField(max_length=50)
    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    pid = models.IntegerField(default=os.getpid)

    class Meta:
        # A handler run is (row, attempt): the same attempt recorded twice would mean two
        # live claims held the row at once.
        constraints = [
            models.UniqueConstraint(fields=["kind", "job_id", "attempt"], name="ledger_one_run_per_attempt")
        ]


class Behaviour(QueueMixin):
    """What process() does is data, so one model covers many test scenarios."""

    name = models.CharField(max_length=100, blank=True, default="")
    action = models.CharField(max_length=20, default="ok")
    fail_times = models.IntegerField(default=0)
    sleep = models.FloatField(default=0)
    note = models.CharField(max_length=100, blank=True, default="")

    queue_retry = ExponentialBackoff(base=0.05, factor=2, max_delay=1, max_attempts=3, jitter=0)

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        if self.sleep:
            time.sleep(self.sleep)
        Ledger.objects.create(kind=type(self).__name__, job_id=self.pk, attempt=self.queue_attempts)
        if self.action == "save":
            self.note = f"saved by attempt {self.queue_attempts}"
            self.save()
        elif self.action == "exit":
            raise SystemExit(3)
        elif self.action == "discard":
            raise Discard("not worth retrying")
        elif self.action == "hang":
            while True:  # swallows its timeout, like a handler stuck in a C call
                try:
                    time.sleep(0.05)
                except BaseException:  # noqa: BLE001 - the point of this handler
                    pass
        if self.queue_attempts <= self.fail_times:
            raise ValueError(f"planned failure on attempt {self.queue_attempts}")


class Job(Behaviour):
    """Lease mode (at-least-once)."""


class AtomicJob(Behaviour):
    """Atomic mode: the ledger row commits with the outcome, exactly once."""

    queue_atomic = True


class GroupedAtomicJob(Behaviour):
    """Atomic mode, ten handlers per transaction, a savepoint each."""

    queue_atomic = True
    queue_atomic_group = 10


class TimeoutJob(Behaviour):
    queue_timeout = 0.5


class TicketQuerySet(QueueQuerySetMixin, models.QuerySet):
    def urgent(self) -> models.QuerySet:
        return self.filter(queue_priority__gte=10)


class Ticket(QueueMixin):
    """A domain model with its own QuerySet and Meta, composed with the mixin."""

    subject = models.CharField(max_length=200)
    customer = models.IntegerField(default=0)
    handled = models.BooleanField(default=False)

    objects = TicketQuerySet.as_manager()

    class Meta(QueueMixin.Meta):
        ordering = ["id"]

    def process(self) -> None:
        self.handled = True
        self.save()


class Noop(QueueMixin):
    """A handler that does nothing: what is left is the queue's own cost."""

    payload = models.CharField(max_length=50, blank=True, default="")

    def process(self) -> None:
        pass


class AtomicNoop(Noop):
    """A proxy: same table, atomic mode (and its plain Meta must not trip the index check)."""

    queue_atomic = True

    class Meta:
        proxy = True
