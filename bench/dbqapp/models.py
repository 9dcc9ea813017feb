"""The queue models of the benchmark: no-op handlers that only write the ledger."""

from __future__ import annotations

from django.db import models

from bench import ledger
from django_dbqueue.models import QueueMixin
from django_dbqueue.workflows import Workflow, workflow


class NoopJob(QueueMixin):
    """Lease mode (at-least-once): successes are recorded in one UPDATE per flush."""

    def process(self) -> None:
        ledger.record(self.pk)


class AtomicJob(QueueMixin):
    """Atomic mode: each handler runs in the transaction that records its outcome."""

    queue_atomic = True

    def process(self) -> None:
        ledger.record(self.pk)


class GroupedJob(QueueMixin):
    """Atomic mode, 100 handlers per transaction (a savepoint each)."""

    queue_atomic = True
    queue_atomic_group = 100

    def process(self) -> None:
        ledger.record(self.pk)


class OptimisticGroupedJob(GroupedJob):
    """GroupedJob's rows (a proxy), its groups optimistic: no savepoint per handler (a
    failure would run the group again with them; these handlers do not fail)."""

    queue_atomic_group_optimistic = True

    class Meta:
        proxy = True


class WorkflowJob(QueueMixin):
    """A 1-step workflow in atomic mode whose step is AtomicJob's handler body: what a step
    costs beside an atomic job (issue #36: at most 1.3x)."""

    queue_atomic = True

    @workflow
    def process(self, wf: Workflow) -> None:
        wf.step("work", ledger.record, self.pk)


class ParkJob(QueueMixin):
    """A workflow that parks before its step: for a sleep (an hour), or until the event "go"
    (``wait``). benchctl park-wake counts what parking and waking it cost."""

    queue_atomic = True
    wait = models.BooleanField(default=False)

    @workflow
    def process(self, wf: Workflow) -> None:
        if self.wait:
            wf.wait_for("go")
        else:
            wf.sleep(3600)
        wf.step("work", ledger.record, self.pk)


class PayloadJob(QueueMixin):
    """Lease mode with a JSON payload: the rows of the bulk-enqueue measurement (issue #33's
    floor is ``bulk_enqueue()`` of rows with JSON payloads against a raw multi-row INSERT)."""

    payload = models.JSONField(default=dict)

    def process(self) -> None:
        ledger.record(self.pk)


class OrderFields(models.Model):
    """The domain fields of an order: what a user's own model holds besides the queue."""

    customer_id = models.BigIntegerField(default=0, db_index=True)
    email = models.CharField(max_length=254, default="")
    status = models.CharField(max_length=20, default="new")
    total = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    currency = models.CharField(max_length=3, default="EUR")
    shipping_address = models.TextField(default="")
    notes = models.TextField(default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class WideOrder(OrderFields, QueueMixin):
    """A wide domain table (an order) that is also a queue."""

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        ledger.record(self.pk)


# The save() pairs: the same model with and without QueueMixin, saved in alternating turns
# (benchctl save-pair): what the mixin costs a user's save() of a new row.
class OrderJob(WideOrder):
    """An order that is also a queue: the QueueMixin side of the order pair."""


class PlainOrder(OrderFields):
    """OrderJob's twin without QueueMixin: the same domain fields, no queue columns."""


class PlainJob(models.Model):
    """NoopJob's twin without QueueMixin: no domain fields at all (only the key)."""


# One table per level of finished rows, so that the claims of all levels can be timed in turns
# within the same minutes: a claim is mostly its commit, whose cost drifts with the shared machine.
class WideJob(WideOrder):
    """The wide table of the first level (no finished rows by default)."""


class WideJobMid(WideOrder):
    """The wide table of the second level (100,000 finished rows by default)."""


class WideJobLarge(WideOrder):
    """The wide table of the third level (1,000,000 finished rows by default)."""


WIDE_TABLES: tuple[type[WideOrder], ...] = (WideJob, WideJobMid, WideJobLarge)
#: The save() pairs by name: (queue model, its twin without QueueMixin).
SAVE_PAIRS: dict[str, tuple[type[models.Model], type[models.Model]]] = {
    "order": (OrderJob, PlainOrder),
    "bare": (NoopJob, PlainJob),
}
