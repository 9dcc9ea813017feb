"""The queue's models: the ``QueueMixin`` for any domain model, and the app's own tables.

The public face: Django's model discovery imports this module, and the documented imports
(``from django_dbqueue.models import QueueMixin, Message, QueueAttempt, ...``) point here.
The app's own bookkeeping tables live in :mod:`django_dbqueue.tables`, below the engine
(``QueueMixin`` and the QuerySets in :mod:`django_dbqueue.queue`, the engine);
``Message`` lives in its feature wing (:mod:`django_dbqueue.messaging`), ``TaskRecord`` in
:mod:`django_dbqueue.tasks`; both declare ``app_label = "django_dbqueue"`` and are registered when
this module imports them. ``django_dbqueue`` must
be in ``INSTALLED_APPS`` (system check ``django_dbqueue.E000`` says so when it is not).
"""

from __future__ import annotations

from ..messaging.message import ArchivedMessage, Message, MessageQuerySet, PayloadField, UndecodablePayload
from ..observability.trace_mixin import QueueTraceMixin
from ..queue.mixin import (
    CLAIM_INDEX_FIELDS,
    DUE_INDEX_FIELDS,
    HAS_ERROR_INDEX_FIELDS,
    QueueMixin,
    queue_model,
    queue_models,
)
from ..queue.queryset import QueueManager, QueueQuerySet, QueueQuerySetMixin
from ..queue.row import QUEUE_FIELDS
from ..tables.attempt import QueueAttempt
from ..tables.cancel_request import CancelRequest
from ..tables.composition import Batch, JobDependency, JobWait
from ..tables.fairness import QueueFairTurn
from ..tables.flow import QueueKeySlot, QueuePause
from ..tables.reply import Reply
from ..tables.schedule import Schedule, ScheduleFiring
from ..tables.worker_process import WorkerProcess
from ..tables.workflow import WorkflowEvent, WorkflowProgress, WorkflowStep
from ..tasks.record import TaskRecord

__all__ = [
    "CLAIM_INDEX_FIELDS",
    "DUE_INDEX_FIELDS",
    "HAS_ERROR_INDEX_FIELDS",
    "QUEUE_FIELDS",
    "ArchivedMessage",
    "Batch",
    "CancelRequest",
    "JobDependency",
    "JobWait",
    "Message",
    "MessageQuerySet",
    "PayloadField",
    "QueueAttempt",
    "QueueFairTurn",
    "QueueKeySlot",
    "QueueManager",
    "QueueMixin",
    "QueuePause",
    "QueueQuerySet",
    "QueueQuerySetMixin",
    "QueueTraceMixin",
    "Reply",
    "Schedule",
    "ScheduleFiring",
    "TaskRecord",
    "UndecodablePayload",
    "WorkerProcess",
    "WorkflowEvent",
    "WorkflowProgress",
    "WorkflowStep",
    "queue_model",
    "queue_models",
]
