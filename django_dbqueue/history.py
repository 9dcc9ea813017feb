"""Deprecated: ``django_dbqueue.history`` moved into the engine, :mod:`django_dbqueue.queue.history`.

``AttemptOutcome`` is imported from :mod:`django_dbqueue.states`, ``QueueAttempt`` from
:mod:`django_dbqueue.models`; this module goes in 0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from .queue.history import attempt_model, history_enabled
from .states import AttemptOutcome

__all__ = ["AttemptOutcome", "attempt_model", "history_enabled"]

warnings.warn(
    "django_dbqueue.history is deprecated: import AttemptOutcome from django_dbqueue.states and "
    "QueueAttempt from django_dbqueue.models.",
    DeprecationWarning,
    stacklevel=2,
)
