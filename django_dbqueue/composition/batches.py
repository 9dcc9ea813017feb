"""Batches: jobs enqueued together, with callbacks fired exactly once (docs/composition.md).

::

    from django_dbqueue.composition import batch, message

    with batch(on_success=message("import.done", {"file": name}), on_failure=notify_task) as b:
        Order.objects.bulk_enqueue(orders)
        Message.objects.publish("invoice.render", {...})
        render_pdf.enqueue(order_id)
    b.progress()   # {"total": ..., "succeeded": ..., "failed": ..., "cancelled": ..., ...}
    b.cancel()

The ``with`` block is one transaction: the members and the batch commit together or not at
all, and no worker sees a member before the batch knows its total. Every queue row created
or re-queued inside it joins the batch (``queue_batch``). The counters move in each member's
outcome transaction (:mod:`django_dbqueue.composition.hooks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import models, router, transaction

from ..backends import DbNow
from ..exceptions import InvalidCallback
from ..messaging.payloads import check_payload
from ..states import QueueState
from ..tables.composition import Batch
from . import hooks as composition

KINDS = ("success", "complete", "failure")


def message(kind: str, payload: Any = None, *, queue: str = "default", priority: int = 0) -> dict[str, Any]:
    """A callback that publishes a ``Message`` of ``kind``; a dict ``payload`` gets the keys
    ``batch_id`` and ``callback`` ("success", "complete" or "failure") added when it fires."""
    if not isinstance(kind, str) or not kind:
        raise InvalidCallback(f"a message callback needs a kind (a non-empty string), not {kind!r}")
    check_payload(payload, kind)
    return {"message": {"kind": kind, "payload": payload, "queue": queue, "priority": priority}}


def describe_callback(callback: Any) -> dict[str, Any] | None:
    """What the batch row keeps of a callback: a ``message()``, a ``django.tasks`` task (called
    with ``batch_id=`` and ``callback=`` keyword arguments) or a queue row (stored IDLE now,
    made READY when the callback fires). Anything else raises InvalidCallback."""
    if callback is None:
        return None
    if isinstance(callback, dict) and set(callback) == {"message"}:
        if not isinstance(callback["message"], dict):
            raise InvalidCallback(f"not a message callback (use batches.message()): {callback!r}")
        return message(**callback["message"])
    if hasattr(callback, "module_path") and callable(getattr(callback, "enqueue", None)):
        return {"task": callback.module_path, "args": [], "kwargs": {}}
    if isinstance(callback, models.Model) and hasattr(callback, "queue_state"):
        if not callback._state.adding and callback.queue_state != QueueState.IDLE:
            raise InvalidCallback(f"a queue row callback must be new or IDLE, not {callback.queue_state}")
        return {"row": callback._meta.label_lower, "pk": None}
    raise InvalidCallback(
        f"a batch callback must be a job: batches.message(kind, payload), a django.tasks task or "
        f"a queue row, not {callback!r}"
    )


def _batches(using: str) -> models.QuerySet:
    return Batch._base_manager.using(using)


@contextmanager
def batch(
    on_success: Any = None,
    on_complete: Any = None,
    on_failure: Any = None,
    *,
    description: str = "",
    using: str | None = None,
) -> Iterator[Any]:
    """Enqueue the jobs of the block as one batch (one transaction); yields the ``Batch``.

    ``on_success`` fires when every member succeeded, ``on_complete`` when every member
    finished whatever its outcome, ``on_failure`` when the first member failed for good."""
    given = {"success": on_success, "complete": on_complete, "failure": on_failure}
    specs = {kind: describe_callback(callback) for kind, callback in given.items()}  # before writing
    if composition.current() is not None:
        raise ValueError("batches do not nest: close the open batch first")
    model = Batch
    using = using or router.db_for_write(model)
    with transaction.atomic(using=using):
        for kind, spec in specs.items():
            if spec is not None and "row" in spec:
                row = given[kind]
                if row._state.adding:
                    row.queue_state = QueueState.IDLE
                    row.save(using=using, force_insert=True)
                spec["pk"] = row.pk
        callbacks = {kind: spec for kind, spec in specs.items() if spec is not None}
        opened = _batches(using).create(description=description, callbacks=callbacks, created_at=DbNow())
        token = composition.open_batch(opened.pk, using)
        try:
            yield opened
        finally:
            members = composition.close_batch(token).models
        total = sum(m._base_manager.using(using).filter(queue_batch=opened.pk).count() for m in members)
        labels = sorted(m._meta.label_lower for m in members)
        _batches(using).filter(pk=opened.pk).update(total=total, member_models=labels)
        opened.total, opened.member_models = total, labels
        counts = (
            _batches(using)
            .filter(pk=opened.pk)
            .values("total", "succeeded", "failed", "cancelled", "callbacks")[0]
        )
        if counts["succeeded"] + counts["failed"] + counts["cancelled"] >= total:
            composition.settle(using, opened.pk, counts)  # empty, or finished before it closed


def cancel_batch(opened: Any) -> int:
    """Cancel the members of a batch that have not started; RUNNING ones finish (their
    outcomes are counted), so ``on_complete`` fires once the last of them ends."""
    return opened.cancel()
