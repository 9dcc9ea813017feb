"""Batches and chains on the outcome path: counters and promotions in the outcome's transaction.

Every final outcome (success, failure for good, cancellation; by a worker, the rescue or an
operator's bulk cancel) calls :func:`finished` inside the transaction that writes it. A row in
no batch and with no dependants returns at once: the test is on the loaded row
(``queue_batch``, ``queue_dependants``), so the outcome path costs no statement more.

For the others, a batch's counters move by one ``UPDATE … SET succeeded = succeeded + n`` per
batch: that row lock serialises the last finishers, and the one whose increment crosses the
total fires the callback in its own transaction (``*_fired_at IS NULL`` guards it a second
time). A dependant's ``pending`` count falls the same way and the transaction that brings it to
0 makes it READY. A worker killed before its commit changes nothing (the lease brings the job
back, and its outcome is counted when it finishes again); after, the callback is committed with
the outcome. See docs/composition.md.
"""

from __future__ import annotations

import contextvars
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models
from django.db.models import Case, F, Value, When
from django.db.models.signals import pre_save

from ..backends import DbNow, backend_for
from ..observability import traces
from ..queue.row import COMPOSITION_FIELDS
from ..states import TERMINAL_STATES, QueueState
from ..tables.composition import Batch, JobDependency, JobWait
from ..tasks.registry import registered_task

if TYPE_CHECKING:
    from ..queue.row import QueueRow

#: The columns a row's outcome needs loaded to know whether it is in a composition (the
#: engine's columns: it loads them for the ``ended`` extension point).
FIELDS = COMPOSITION_FIELDS
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
_LEAVE_IF_FINISHED = Case(
    When(queue_state__in=sorted(TERMINAL_STATES), then=Value(None)),
    default=F("queue_batch"),
    output_field=models.BigIntegerField(),
)


@dataclass
class OpenBatch:
    """The batch whose ``with`` block is running in this context: new rows join it."""

    pk: int
    using: str
    models: set[type[models.Model]] = field(default_factory=set)


_open: contextvars.ContextVar[OpenBatch | None] = contextvars.ContextVar("dbqueue_batch", default=None)


def open_batch(pk: int, using: str) -> contextvars.Token[OpenBatch | None]:
    _listen_for_members()
    return _open.set(OpenBatch(pk, using))


_listening = False


def _listen_for_members() -> None:
    """Connect :func:`on_pre_save` for every queue model, the first time a batch opens.

    Until then no queue model's ``save()`` pays a receiver for a feature nobody uses (issue
    #33: a ``pre_save`` receiver takes Django's signal dispatch off its no-receiver path).
    Per queue model, not for every sender: other models' saves keep that path."""
    global _listening
    if _listening:
        return
    for model in apps.get_models():
        if all(hasattr(model, name) for name in FIELDS):  # QueueRow's columns: a queue model
            pre_save.connect(
                on_pre_save, sender=model, dispatch_uid=f"dbqueue-batch-member-{model._meta.label}"
            )
    _listening = True


def close_batch(token: contextvars.Token[OpenBatch | None]) -> OpenBatch:
    opened = _open.get()
    _open.reset(token)
    assert opened is not None
    return opened


def current() -> OpenBatch | None:
    return _open.get()


def stamp(
    model: type[models.Model], values: dict[str, Any] | None = None, rows: list[Any] | None = None
) -> None:
    """An enqueue's bookkeeping (``traces.stamp`` too): new ``rows`` join the open batch; an
    UPDATE that re-queues rows (``values``) puts them in it, or out of the one they finished in
    (counted there already)."""
    traces.stamp(model, values, rows)
    opened = _open.get()
    if values is not None:
        # A finished row leaves its batch; a waiting or queued one stays in it. First in the
        # SET list: MySQL evaluates assignments left to right, and the CASE reads the old state.
        rest = dict(values)
        values.clear()
        values["queue_batch"] = opened.pk if opened else _LEAVE_IF_FINISHED
        values.update(rest)
    if opened is not None:
        opened.models.add(model)
        for row in rows or ():
            row.queue_batch = opened.pk


def stamp_values(model: type[models.Model], count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`stamp` for ``count`` new rows inserted from values, not instances (``bulk_enqueue``
    of mappings): the values every row takes (the open batch), and those a row takes where it
    gives none (its enqueue span's context); both empty when no batch is open and nothing is
    traced."""
    fixed: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    if traces.traced(model) and traces.active():
        defaults[traces.FIELD] = traces.enqueue_context(model, count=count)
    opened = _open.get()
    if opened is not None:
        opened.models.add(model)
        fixed["queue_batch"] = opened.pk
    return fixed, defaults


def on_pre_save(sender: type[models.Model], instance: Any, raw: bool = False, **kwargs: Any) -> None:
    """A queue row created one by one (``save()``, ``publish()``, a task) joins the open batch."""
    opened = _open.get()
    if opened is None or raw or not instance._state.adding or not hasattr(instance, "queue_batch"):
        return
    if instance.queue_batch is None:
        instance.queue_batch = opened.pk
        opened.models.add(sender)


# -- outcomes ------------------------------------------------------------------------------------


def finished(
    model: type[QueueRow],
    using: str,
    succeeded: Iterable[Any] = (),
    failed: Iterable[Any] = (),
    cancelled: Iterable[Any] = (),
) -> None:
    """Count final outcomes of ``model``'s rows (instances with ``FIELDS`` loaded) in their
    batches and dependants; call inside the transaction that wrote them."""
    ended = [
        (outcome, row)
        for outcome, rows in ((SUCCEEDED, succeeded), (FAILED, failed), (CANCELLED, cancelled))
        for row in rows
        if row.queue_batch is not None or row.queue_dependants
    ]
    if not ended:
        return
    per_batch: dict[int, Counter[str]] = defaultdict(Counter)
    for outcome, row in ended:
        if row.queue_batch is not None:
            per_batch[row.queue_batch][outcome] += 1
    for pk in sorted(per_batch):  # one lock order: two finishers never deadlock on batches
        _count(using, pk, per_batch[pk])
    parents = {str(row.pk): outcome for outcome, row in ended if row.queue_dependants}
    if parents:
        _settle_dependants(model._meta.label_lower, using, parents)


def finished_keys(model: type[QueueRow], using: str, pks: Sequence[Any], outcome: str) -> None:
    """Like :func:`finished` for rows known by key only (a row that could not be loaded)."""
    rows = list(model._base_manager.using(using).filter(pk__in=list(pks)).only("pk", *FIELDS))
    finished(model, using, **{outcome: rows})


# -- batches -------------------------------------------------------------------------------------

#: The model a batch's ``message()`` callback is published on. ``Message`` sets it when its
#: class is created (:mod:`django_dbqueue.messaging.message`): messaging sits above this module
#: (a message joins batches and chains through it), so this module can neither import the
#: model nor should it look it up by name.
MESSAGE_MODEL: Any = None


def _batches(using: str) -> models.QuerySet:
    return Batch._base_manager.using(using)


def _count(using: str, pk: int, outcomes: Counter[str]) -> None:
    batch = _batches(using).filter(pk=pk)
    if not batch.update(**{name: F(name) + outcomes[name] for name in (SUCCEEDED, FAILED, CANCELLED)}):
        return  # the batch was deleted: its members finish on their own
    # Read under this transaction's lock on the batch row: the counts of every finisher
    # committed before, plus this one's.
    now = batch.values("total", SUCCEEDED, FAILED, CANCELLED, "callbacks").get()
    done = now[SUCCEEDED] + now[FAILED] + now[CANCELLED]
    if now[FAILED] and now[FAILED] == outcomes[FAILED]:  # the first failure for good
        fire(using, pk, "failure", now["callbacks"])
    if now["total"] and done - sum(outcomes.values()) < now["total"] <= done:
        settle(using, pk, now)


def settle(using: str, pk: int, counts: dict[str, Any]) -> None:
    """The batch has finished: fire ``complete``, and ``success`` if no member failed."""
    if not counts[FAILED] and not counts[CANCELLED]:
        fire(using, pk, "success", counts["callbacks"])
    fire(using, pk, "complete", counts["callbacks"])


def fire(using: str, pk: int, which: str, callbacks: dict[str, Any]) -> None:
    """Enqueue the ``which`` callback of batch ``pk`` once: its ``*_fired_at`` is set here."""
    if (
        not _batches(using)
        .filter(pk=pk, **{f"{which}_fired_at__isnull": True})
        .update(**{f"{which}_fired_at": DbNow()})
    ):
        return
    spec = callbacks.get(which)
    if not spec:
        return
    token = _open.set(None)  # a callback is never a member of a batch being declared
    try:
        if "message" in spec:
            payload = spec["message"].get("payload")
            if isinstance(payload, dict):
                payload = {**payload, "batch_id": pk, "callback": which}
            message = MESSAGE_MODEL
            options = {k: v for k, v in spec["message"].items() if k in ("queue", "priority")}
            message.objects.using(using).publish(spec["message"]["kind"], payload, **options)
        elif "task" in spec:
            kwargs = {**spec.get("kwargs", {}), "batch_id": pk, "callback": which}
            # The stored path names a Task this process registered, never a module to import.
            task = registered_task(spec["task"])
            if task is None:
                raise LookupError(f"batch callback {spec['task']!r} is not a registered django.tasks Task")
            task.enqueue(*spec.get("args", []), **kwargs)
        else:
            promote(using, spec["row"], [spec["pk"]])
    finally:
        _open.reset(token)


# -- dependants ----------------------------------------------------------------------------------


def _edges(using: str) -> models.QuerySet:
    return JobDependency._base_manager.using(using)


def _waits(using: str) -> models.QuerySet:
    return JobWait._base_manager.using(using)


def promote(using: str, label: str, pks: Sequence[Any]) -> int:
    """Make waiting (IDLE) rows READY, due now."""
    model = apps.get_model(label)
    count = (
        model._base_manager.using(using)
        .filter(pk__in=list(pks), queue_state=QueueState.IDLE)
        .update(queue_state=QueueState.READY, queue_run_at=DbNow(), queue_enqueued_at=DbNow())
    )
    if count:
        backend_for(using).notify([model._meta.db_table])
    return count


def _settle_dependants(label: str, using: str, parents: dict[str, str]) -> None:
    edges = list(
        _edges(using)
        .filter(parent_model=label, parent_pk__in=list(parents), settled=False)
        .values_list("pk", "parent_pk", "wait_id", "wait__on_parent_failure")
    )
    if not edges:
        return
    _edges(using).filter(pk__in=[edge[0] for edge in edges]).update(settled=True)
    fall: Counter[int] = Counter()
    doomed: set[int] = set()
    for _pk, parent, wait, policy in edges:
        if parents[parent] == SUCCEEDED or policy == "run":
            fall[wait] += 1
        else:
            doomed.add(wait)
    by_amount: dict[int, list[int]] = defaultdict(list)
    for wait, amount in fall.items():
        by_amount[amount].append(wait)
    for amount, waits in by_amount.items():
        _waits(using).filter(pk__in=sorted(waits)).update(pending=F("pending") - amount)
    ready = (
        _waits(using).filter(pk__in=list(fall), pending=0, promoted_at__isnull=True).exclude(pk__in=doomed)
    )
    for wait_label, pks in _group(ready.values_list("model", "object_pk")).items():
        promote(using, wait_label, pks)
    ready.update(promoted_at=DbNow())
    if doomed:
        for wait_label, pks in _group(
            _waits(using).filter(pk__in=doomed).values_list("model", "object_pk")
        ).items():
            cancel_dependants(using, wait_label, pks, f"a parent ({label}) failed or was cancelled")


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for label, pk in pairs:
        grouped[label].append(pk)
    return grouped


def cancel_dependants(using: str, label: str, pks: Sequence[Any], why: str) -> None:
    """End waiting rows CANCELLED (policy ``cancel``), and tell their batches and dependants."""
    model = apps.get_model(label)
    rows = model._base_manager.using(using).filter(
        pk__in=list(pks), queue_state__in=(QueueState.IDLE, QueueState.READY)
    )
    told = list(rows.select_for_update().only("pk", *FIELDS))
    model._base_manager.using(using).filter(pk__in=[row.pk for row in told]).update(
        queue_state=QueueState.CANCELLED, queue_finished_at=DbNow(), queue_last_error=why
    )
    finished(model, using, cancelled=told)
