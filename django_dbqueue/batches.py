"""Deprecated: ``django_dbqueue.batches`` moved to :mod:`django_dbqueue.composition`.

``from django_dbqueue.composition import batch, message`` in its place; this module goes in
0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from .composition.batches import batch, message

__all__ = ["batch", "message"]

warnings.warn(
    "django_dbqueue.batches is deprecated: import batch and message from django_dbqueue.composition.",
    DeprecationWarning,
    stacklevel=2,
)
