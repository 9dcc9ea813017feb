"""``@workflow``: a queue row's handler written as named steps."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..exceptions import Park
from . import checkpoints
from .run import Workflow

if TYPE_CHECKING:
    from ..queue.row import QueueRow

Row = TypeVar("Row", bound="QueueRow")


def workflow(method: Callable[[Row, Workflow], Any]) -> Callable[[Row], None]:
    """Make ``process(self, wf)`` the handler of a durable workflow::

        class Order(QueueMixin):
            queue_atomic = True

            @workflow
            def process(self, wf):
                stock = wf.step("reserve", self.reserve_stock)
                wf.step("charge", self.charge, stock)

    Each run replays the method from the top with a fresh :class:`Workflow` (``wf``): the
    steps the row's checkpoints hold are skipped and return their stored results. The method
    must take the same path on every replay (decide on step results, not on the clock or on
    random numbers outside a step); its return value is ignored, and its end is the row's
    success."""
    if not callable(method):
        raise TypeError(f"@workflow decorates a method process(self, wf), not {method!r}")

    @functools.wraps(method)
    def process(self: Row) -> None:
        wf = Workflow(self)
        try:
            method(self, wf)
        except Park:
            wf.end_of_run()  # parked: what the run did is kept, its progress too
            raise
        wf.end_of_run()

    process.workflow = True  # type: ignore[attr-defined]
    # Atomic mode writes a handler's success before it runs unless the handler may park
    # (worker/atomic.py, may_park): a workflow's run ends parked until its last step.
    process.may_park = True  # type: ignore[attr-defined]
    # ... but its success can be written first all the same, as any atomic job's (it locks the
    # row), and turned into the park in place when the run parks: one statement where a lock
    # and the run's end were two. The checkpoints of a claim's rows are then read in one
    # statement before its first run (process.preload).
    process.parks_in_place = True  # type: ignore[attr-defined]
    process.preload = checkpoints.preload  # type: ignore[attr-defined]
    # Where the lock is a read first (SQLite, or a model with queue_success_first = False),
    # that read brings the run's checkpoints and events along.
    process.hold = checkpoints.hold  # type: ignore[attr-defined]
    return process
