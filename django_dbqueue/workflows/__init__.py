"""Durable workflows on the domain row (docs/howto/workflows.md): a queue row's handler
written as named steps, each checkpointed (with its database effects, in atomic mode) so a
crash re-runs only the step it interrupted; durable sleeps and waits for events that park the
row and hold no worker, connection or transaction.

Public names: ``workflow`` (the decorator), ``Workflow`` (its ``wf``), ``send_event``,
``WorkflowMixin``, ``fork_from``, ``forget``, ``steps_of``; ``WaitTimeout`` lives with the
other exceptions. The checkpoints and events are the app's tables
(:mod:`django_dbqueue.tables.workflow`); a run's end is an outcome written by the engine's
``record()``, like any other (a park is its "deferred" end).
"""

from __future__ import annotations

from ..exceptions import WaitTimeout
from .decorator import workflow
from .events import send_event
from .rows import WorkflowMixin, forget, fork_from, steps_of
from .run import Workflow

__all__ = [
    "WaitTimeout",
    "Workflow",
    "WorkflowMixin",
    "forget",
    "fork_from",
    "send_event",
    "steps_of",
    "workflow",
]
