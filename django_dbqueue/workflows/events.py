"""Events sent to workflow rows: ``send_event()`` from any process, taken by ``wait_for()``.

An event is a row of :class:`~django_dbqueue.tables.workflow.WorkflowEvent`, written in the
sender's transaction: one sent in a transaction that rolls back never existed. It stays until
a ``wait_for()`` of its name takes it (so an event sent before the wait is kept), and a wait
takes it in the transaction that checkpoints the wait: it wakes the workflow once.

Waking: a row waiting for the event is READY with a due time in the future; the sender makes
it due now. Who decides first is ordered by the row's lock. The sender's INSERT of its event
locks the row (its rows come from ``SELECT … FOR UPDATE`` of the queue row), and only then
does its UPDATE look for a waiting run. A run holds the same lock while it decides to wait:

* in atomic mode from its first statement (the claim's fenced lock) to its commit. A send
  that locked the row first has committed its event before the run's read of its events; a
  send that comes second waits for the run's commit, and its UPDATE sees the wait;
* in lease mode only while it writes its park: after writing the row, in that transaction,
  it looks for an event sent meanwhile (the ``then`` of
  :class:`~django_dbqueue.exceptions.Park`; the sender holds the lock until it commits, so
  that look sees its event).

Whichever comes second sees what the first committed, so an event is never left sitting next
to a row parked for it.
"""

from __future__ import annotations

from typing import Any

from django.db import router, transaction
from django.db.models import Exists

from ..backends import DbNow, backend_for
from ..messaging.payloads import check_payload, check_text
from ..queue.row import QueueRow
from ..states import QueueState
from ..tables.workflow import WorkflowEvent
from .checkpoints import key_of
from .statements import event_statements


def send_event(row: QueueRow, name: str, data: Any = None, *, using: str | None = None) -> bool:
    """Send the event ``name`` (with JSON ``data``) to the workflow row ``row``, in the
    caller's transaction. Returns whether it woke a run waiting for it; either way the event
    is kept until a ``wait_for(name)`` takes it (a row that no longer exists gets none).

    Two statements (statements.py, :class:`EventStatements`): the event's INSERT, which
    locks the row, and the fenced UPDATE that makes it due if it waits for this event. No
    savepoint: inside the caller's transaction an error of either leaves that transaction to
    roll back, which takes the event with it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an event's name is a non-empty string, not {name!r}")
    check_text(name, "the event's name")
    check_payload(data, f"event {name}")
    model = type(row)
    db = using or row._state.db or router.db_for_write(model)
    fenced = event_statements(model, db)
    key = key_of(row)
    with transaction.atomic(using=db, savepoint=False):
        # The INSERT locks the row first (on SQLite it takes the write lock): orders this send
        # with a run that parks (see the module's docstring).
        if not fenced.send(key, row.pk, name, data):
            return False  # gone
        woke = fenced.wake(key, row.pk, name)  # running (its run takes the event), finished: no
    if woke:
        backend_for(db).notify([model._meta.db_table])
    return woke


def wake_if_sent(row: QueueRow, name: str, using: str) -> None:
    """The ``then`` of a run that parked waiting for ``name``: its row is written and locked
    now; an event sent meanwhile wakes it at once."""
    if WorkflowEvent.objects.using(using).filter(**key_of(row), name=name).exists():
        _wake(row, using)


def _wake(row: QueueRow, using: str) -> bool:
    """The park's own wake (lease mode's ``then``; the sender's is its fenced UPDATE)."""
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


def sent(row: QueueRow, name: str) -> Exists:
    """The condition "an event ``name`` waits for ``row``", for the UPDATE that parks it
    (``Park.due_if``): a run that read its events before it locked its row (a claim's
    preload) finds there one sent in between, in the statement that parks it."""
    return Exists(WorkflowEvent.objects.filter(**key_of(row), name=name))


def take_held(held: list[WorkflowEvent], name: str, using: str) -> WorkflowEvent | None:
    """:func:`take` in an atomic run that read the row's events with its lock or with its
    claim (where rows are locked: a send's INSERT waits for the run's lock, so ``held`` is
    every event but those sent before the run locked its row, which its park looks for: see
    :func:`sent`): the oldest named ``name``, deleted by its key; no statement when there is
    none. One gone already (``forget()`` takes no lock on the row) was never received: the
    next."""
    for event in [event for event in held if event.name == name]:
        held.remove(event)
        if WorkflowEvent.objects.using(using).filter(pk=event.pk).delete()[0]:
            return event
    return None
