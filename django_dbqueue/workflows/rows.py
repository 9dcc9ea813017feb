"""What the application does to a workflow row from outside its runs: send it an event, run
it again from a step (an operator's fork), forget its checkpoints."""

from __future__ import annotations

from typing import Any

from django.db import router, transaction

from ..queue.queryset import QueueQuerySet
from ..queue.row import QueueRow
from ..states import QueueState
from ..tables.workflow import WorkflowEvent, WorkflowStep
from .checkpoints import key_of
from .events import send_event


class WorkflowMixin:
    """Optional: workflow calls as methods of the row (``order.send_event(...)``). Mix it in
    before ``QueueMixin``: ``class Order(WorkflowMixin, QueueMixin)``."""

    def send_event(self, name: str, data: Any = None, *, using: str | None = None) -> bool:
        """See :func:`django_dbqueue.workflows.send_event`."""
        return send_event(_queue_row(self), name, data, using=using)

    def workflow_steps(self, using: str | None = None) -> Any:
        """The row's checkpoints, in the order its runs reached them."""
        return steps_of(_queue_row(self), using)


def _queue_row(row: object) -> QueueRow:
    if not isinstance(row, QueueRow):
        raise TypeError(f"WorkflowMixin goes on a QueueMixin model, not on {type(row).__name__}")
    return row


def steps_of(row: QueueRow, using: str | None = None) -> Any:
    db = using or row._state.db or router.db_for_read(type(row))
    return WorkflowStep.objects.using(db).filter(**key_of(row)).order_by("position")


def fork_from(row: QueueRow, position: int, using: str | None = None) -> int:
    """Forget the checkpoints of the steps from ``position`` (1-based, as the timeline shows
    them) on, and queue the row again, due now (``enqueue()``: a fresh attempt budget, whatever
    state it ended in): its next run replays the earlier steps' results and runs those steps
    again. Returns how many checkpoints were forgotten. A RUNNING row is refused
    (``ValueError``, nothing changed): its worker owns it until its run ends."""
    if not isinstance(position, int) or isinstance(position, bool) or position < 1:
        raise ValueError(f"fork_from() takes a step position from 1, not {position!r}")
    db = using or row._state.db or router.db_for_write(type(row))
    queue: QueueQuerySet[Any] = QueueQuerySet(model=type(row), using=db).filter(pk=row.pk)
    with transaction.atomic(using=db):
        states = list(queue.select_for_update().values_list("queue_state", flat=True))
        if states == [QueueState.RUNNING]:
            raise ValueError(f"{row._meta.label} pk={row.pk} is running: fork it once its run ends")
        forgotten, _ = steps_of(row, db).filter(position__gte=position).delete()
        queue.enqueue()
    return forgotten


def forget(row: QueueRow, using: str | None = None) -> None:
    """Delete the row's checkpoints and its events not received (e.g. before it is enqueued
    as a new workflow, or once it is done with)."""
    db = using or row._state.db or router.db_for_write(type(row))
    with transaction.atomic(using=db):
        steps_of(row, db).delete()
        WorkflowEvent.objects.using(db).filter(**key_of(row)).delete()
