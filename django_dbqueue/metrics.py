"""Deprecated: ``django_dbqueue.metrics`` moved to :mod:`django_dbqueue.observability`.

``from django_dbqueue.observability import metrics_view`` in its place;
this module goes in 0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from .observability.metrics import metrics_view

__all__ = ["metrics_view"]

warnings.warn(
    "django_dbqueue.metrics is deprecated: import metrics_view from django_dbqueue.observability.",
    DeprecationWarning,
    stacklevel=2,
)
