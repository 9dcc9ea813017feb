"""Deprecated: ``django_dbqueue.handlers`` moved to :mod:`django_dbqueue.messaging`.

``from django_dbqueue.messaging import handler`` in its place;
this module goes in 0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from .messaging.handlers import handler

__all__ = ["handler"]

warnings.warn(
    "django_dbqueue.handlers is deprecated: import handler from django_dbqueue.messaging.",
    DeprecationWarning,
    stacklevel=2,
)
