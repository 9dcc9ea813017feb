"""Deprecated: ``django_dbqueue.models.message`` moved to :mod:`django_dbqueue.messaging.message`.

``from django_dbqueue.models import Message, MessageQuerySet, PayloadField, ...`` (or
``django_dbqueue.messaging.message``) in its place; this module goes in 0.4.0 (CHANGELOG.md).
"""

from __future__ import annotations

import warnings

from ..messaging.message import ArchivedMessage, Message, MessageQuerySet, PayloadField, UndecodablePayload

__all__ = ["ArchivedMessage", "Message", "MessageQuerySet", "PayloadField", "UndecodablePayload"]

warnings.warn(
    "django_dbqueue.models.message is deprecated: "
    "import MessageQuerySet from django_dbqueue.messaging.message.",
    DeprecationWarning,
    stacklevel=2,
)
