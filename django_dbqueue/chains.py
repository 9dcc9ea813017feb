"""Deprecated: ``django_dbqueue.chains`` moved to :mod:`django_dbqueue.composition`.

``from django_dbqueue.composition import enqueue_after`` in its place; this module goes in
0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from .composition.chains import enqueue_after

__all__ = ["enqueue_after"]

warnings.warn(
    "django_dbqueue.chains is deprecated: import enqueue_after from django_dbqueue.composition.",
    DeprecationWarning,
    stacklevel=2,
)
