"""Deprecated: ``django_dbqueue.models.messaging`` moved to :mod:`django_dbqueue.messaging.mixin`.

``from django_dbqueue.messaging.mixin import MessagingMixin`` in its place;
this module goes in 0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from ..messaging.mixin import MessagingMixin

__all__ = ["MessagingMixin"]

warnings.warn(
    "django_dbqueue.models.messaging is deprecated: "
    "import MessagingMixin from django_dbqueue.messaging.mixin.",
    DeprecationWarning,
    stacklevel=2,
)
