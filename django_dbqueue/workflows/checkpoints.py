"""A workflow row's checkpoints: read once per run, written as each step ends.

Atomic mode (``queue_atomic``): the run is inside the worker's transaction, which holds the
row's lock and records the run's end; a checkpoint is one INSERT in it, so it commits with the
step's database effects and with the row's outcome, or not at all. Lease mode: a checkpoint is
written in a transaction of its own, behind the claim's lock (``SELECT … FOR UPDATE`` fenced
by its token), so a worker that lost its claim writes none and stops with ``LeaseLost``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ..exceptions import LeaseLost
from ..messaging.payloads import check_payload
from ..queue.statements import statements
from ..tables.workflow import WorkflowStep
from .statements import Held, hold_statement, step_statements

if TYPE_CHECKING:
    from ..queue.lease import Claim
    from ..queue.row import QueueRow


def key_of(row: QueueRow) -> dict[str, str]:
    """The columns that name ``row`` in the workflow tables."""
    return {"model": row._meta.label, "object_pk": str(row.pk)}


#: Where :func:`hold` leaves the checkpoints it read for the run's :func:`load`.
_HELD = "_dbqueue_checkpoints"


def hold(row: QueueRow, claim: Claim) -> bool:
    """Atomic mode's first statement of a run of ``row`` (the worker calls it as
    ``process.hold``, see worker/atomic.py): lock the row if ``claim`` still holds it, and
    read its checkpoints in the same statement (statements.py, :class:`HoldStatement`), kept
    on the instance for the run's :func:`load`, with the row's events not received. False if
    the claim is lost."""
    held = hold_statement(type(row), claim.using).hold(key_of(row), row.pk, claim.token)
    if held is None:
        return False
    row.__dict__[_HELD] = held
    return True


def preload(rows: list[QueueRow], claim: Claim) -> None:
    """Atomic mode where a run's first statement is its success UPDATE, which locks the row
    without reading it (worker/atomic.py, ``process.preload``): the checkpoints of all the
    claim's rows in one SELECT, kept on each instance for its run's :func:`load`. Read before
    each row's lock, they are still what its run finds: only a run of the row writes them, and
    the claim's token fences every other (an operator's fork refuses a RUNNING row). Their
    events too (the same SELECT): a send may add one before a run locks its row, which the
    run's wait looks for in its park's UPDATE (``Park.due_if``)."""
    if not rows:
        return
    label, keys = rows[0]._meta.label, [str(row.pk) for row in rows]
    found, sent = step_statements(claim.using).preload(label, keys)
    for row in rows:
        row.__dict__[_HELD] = Held(found[str(row.pk)], sent[str(row.pk)], locked=False)


def load(row: QueueRow) -> Held | None:
    """What :func:`hold` or :func:`preload` read of the row's checkpoints and events, or None
    when neither did: then the checkpoints are :func:`read` and the events left to each wait."""
    held: Held | None = row.__dict__.pop(_HELD, None)
    return held


def read(row: QueueRow, using: str) -> dict[str, WorkflowStep]:
    """The row's checkpoints by name: one SELECT (its SQL built once: statements.py)."""
    return step_statements(using).load(**key_of(row))


def write(row: QueueRow, using: str, **values: Any) -> WorkflowStep:
    """A new checkpoint of ``row``: one INSERT (its SQL built once: statements.py)."""
    return step_statements(using).insert(**key_of(row), **values)


def as_stored(value: Any, name: str) -> Any:
    """``value`` as a replay will see it (through JSON), so the first run and every later
    one pass the next step the same thing; a value JSON cannot hold, or too big for the
    payload limit, is a clear error at the step that returned it."""
    if value is None or type(value) is bool:
        # JSON gives these back as they are (a step with only database effects returns None):
        # no check, no round trip. Exact types: a subclass (an IntEnum...) comes back plain.
        return value
    try:
        check_payload(value, f"step {name}")
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"the workflow step {name!r} returned a value that cannot be stored: {exc}") from exc
    return json.loads(json.dumps(value))


@contextlib.contextmanager
def writing(row: QueueRow, using: str) -> Iterator[None]:
    """Where a checkpoint is written: in atomic mode the worker's transaction already holds
    the row; in lease mode a transaction of its own, behind the claim's lock."""
    if type(row).queue_atomic:
        yield
        return
    claim = row.queue_claim()
    with transaction.atomic(using=using):
        if not statements(type(row), using).lock_held([row.pk], claim):
            raise LeaseLost(f"{row._meta.label} pk={row.pk}: lease lost, workflow checkpoint not written")
        yield
