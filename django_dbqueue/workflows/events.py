"""Events sent to workflow rows: ``send_event()`` from any process, taken by ``wait_for()``.

An event is a row of :class:`~django_dbqueue.tables.workflow.WorkflowEvent`, written in the
sender's transaction: one sent in a transaction that rolls back never existed. It stays until
a ``wait_for()`` of its name takes it (so an event sent before the wait is kept), and a wait
takes it in the transaction that checkpoints the wait: it wakes the workflow once.

Waking: a row waiting for the event is READY with a due time in the future; the sender makes
it due now. Who decides first is ordered by the row's lock. The sender inserts its event and
then locks the row (``SELECT … FOR UPDATE``) before it looks for a waiting run; a run that
parks writes its row (the same lock) and then, in that transaction, looks for an event (the
``then`` of :class:`~django_dbqueue.exceptions.Park`). Whichever comes second sees what the
first committed, so an event is never left sitting next to a row parked for it.
"""

from __future__ import annotations

from typing import Any

from django.db import router, transaction

from ..backends import DbNow, backend_for
from ..messaging.payloads import check_payload, check_text
from ..queue.row import QueueRow
from ..states import QueueState
from ..tables.workflow import WorkflowEvent, WorkflowStep
from .checkpoints import key_of


def send_event(row: QueueRow, name: str, data: Any = None, *, using: str | None = None) -> bool:
    """Send the event ``name`` (with JSON ``data``) to the workflow row ``row``, in the
    caller's transaction. Returns whether it woke a run waiting for it; either way the event
    is kept until a ``wait_for(name)`` takes it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an event's name is a non-empty string, not {name!r}")
    check_text(name, "the event's name")
    check_payload(data, f"event {name}")
    model = type(row)
    db = using or row._state.db or router.db_for_write(model)
    with transaction.atomic(using=db):
        WorkflowEvent.objects.using(db).create(**key_of(row), name=name, data=data, sent_at=DbNow())
        # The row's lock, after the event's INSERT (on SQLite the INSERT takes the write lock
        # first): orders this send with a run that parks (see the module's docstring).
        states = model._base_manager.using(db).filter(pk=row.pk).select_for_update()
        if list(states.values_list("queue_state", flat=True)) != [QueueState.READY]:
            return False  # running (its run takes the event), finished, or gone
        return wake_if_waiting(row, name, db)


def wake_if_waiting(row: QueueRow, name: str, using: str) -> bool:
    """Make ``row`` due now if a run of it waits for the event ``name``."""
    waiting = WorkflowStep.objects.using(using).filter(
        **key_of(row), kind=WorkflowStep.WAIT, event=name, finished_at__isnull=True
    )
    if not waiting.exists():
        return False
    return _wake(row, using)


def wake_if_sent(row: QueueRow, name: str, using: str) -> None:
    """The ``then`` of a run that parked waiting for ``name``: its row is written and locked
    now; an event sent meanwhile wakes it at once."""
    if WorkflowEvent.objects.using(using).filter(**key_of(row), name=name).exists():
        _wake(row, using)


def _wake(row: QueueRow, using: str) -> bool:
    model = type(row)
    parked = model._base_manager.using(using).filter(pk=row.pk, queue_state=QueueState.READY)
    if not parked.update(queue_run_at=DbNow()):
        return False
    backend_for(using).notify([model._meta.db_table])
    return True


def take(row: QueueRow, name: str, using: str) -> WorkflowEvent | None:
    """The oldest event ``name`` sent to ``row``, deleted (inside the caller's transaction,
    which checkpoints the wait that takes it); None if none is waiting."""
    events = WorkflowEvent.objects.using(using).filter(**key_of(row), name=name).order_by("pk")
    event = events.select_for_update().first()
    if event is not None:
        WorkflowEvent.objects.using(using).filter(pk=event.pk).delete()
    return event
