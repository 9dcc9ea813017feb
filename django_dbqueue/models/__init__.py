"""The queue's models: the ``QueueMixin`` for any domain model, and the app's own tables.

``from django_dbqueue.models import QueueMixin`` works in any project. The app's concrete
models (``Message``, ``TaskRecord``, ``QueueAttempt``, ``WorkerProcess``, ``QueuePause``,
``QueueKeySlot``, ``ArchivedMessage``) exist only when ``django_dbqueue`` is in
``INSTALLED_APPS``; without it, a system check says what is missing instead of an import error.
"""

from __future__ import annotations

from django.apps import apps

from .mixin import CLAIM_INDEX_FIELDS, QUEUE_FIELDS, QueueMixin, queue_model, queue_models
from .trace import QueueTraceMixin

__all__ = [
    "CLAIM_INDEX_FIELDS",
    "QUEUE_FIELDS",
    "QueueMixin",
    "QueueTraceMixin",
    "queue_model",
    "queue_models",
]

if apps.apps_ready and apps.is_installed("django_dbqueue"):
    from .attempt import QueueAttempt
    from .cancel_request import CancelRequest
    from .composition import Batch, JobDependency, JobWait
    from .flow import QueueKeySlot, QueuePause
    from .message import ArchivedMessage, Message, MessageQuerySet, PayloadField, UndecodablePayload
    from .reply import Reply
    from .schedule import Schedule, ScheduleFiring
    from .task_record import TaskRecord
    from .worker_process import WorkerProcess

    __all__ += [
        "ArchivedMessage",
        "Batch",
        "CancelRequest",
        "JobDependency",
        "JobWait",
        "Message",
        "MessageQuerySet",
        "PayloadField",
        "QueueAttempt",
        "QueueKeySlot",
        "QueuePause",
        "Reply",
        "Schedule",
        "ScheduleFiring",
        "TaskRecord",
        "UndecodablePayload",
        "WorkerProcess",
    ]
