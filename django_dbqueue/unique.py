"""Deprecated: ``django_dbqueue.unique`` moved to :mod:`django_dbqueue.flow`.

``from django_dbqueue.flow import QueueUniqueKey, enqueue_unique`` in its place;
this module goes in 0.4.0 (CHANGELOG.md).

Users' migrations name ``django_dbqueue.unique.QueueUniqueKey``: they keep working.
"""

from __future__ import annotations

import warnings

from .flow.unique import QueueUniqueKey, enqueue_unique

__all__ = ["QueueUniqueKey", "enqueue_unique"]

warnings.warn(
    "django_dbqueue.unique is deprecated: import QueueUniqueKey, enqueue_unique from django_dbqueue.flow.",
    DeprecationWarning,
    stacklevel=2,
)
