"""Deprecated: ``django_dbqueue.query`` moved into the engine, :mod:`django_dbqueue.queue.queryset`.

``from django_dbqueue.models import QueueQuerySetMixin`` (or ``QueueQuerySet``, ``QueueManager``)
in its place; this module goes in 0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from .queue.queryset import QueueManager, QueueQuerySet, QueueQuerySetMixin

__all__ = ["QueueManager", "QueueQuerySet", "QueueQuerySetMixin"]

warnings.warn(
    "django_dbqueue.query is deprecated: import QueueQuerySetMixin, QueueQuerySet and QueueManager "
    "from django_dbqueue.models.",
    DeprecationWarning,
    stacklevel=2,
)
