"""The ``Message`` QuerySet's topic and request-reply methods (docs/messaging.md).

Kept apart from ``message.py`` so that module stays the plain publish path; the work is in
``topics.py`` and ``reply.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import reply, topics


class MessagingMixin:
    """Mixed into ``MessageQuerySet``: ``publish_to_topic``, ``replay_topic``, ``request``."""

    def publish_to_topic(self, topic: str, payload: Any = None, **options: Any) -> int | None:
        """One copy of the message per subscriber group of ``topic``; returns how many were
        inserted (0 when the topic already has the ``key``; None with ``on_commit=True``)."""
        return topics.publish(self, topic, payload, **options)

    def replay_topic(self, topic: str, group: str, *, source: str, since: datetime | None = None) -> int:
        """Give ``group`` a copy of the ``source`` group's messages still in the table."""
        return topics.replay(self, topic, group, source=source, since=since)

    def request(self, kind: str, payload: Any = None, *, timeout: float, **options: Any) -> Any:
        """Publish a request and wait up to ``timeout`` seconds for its handler's reply."""
        return reply.request(self, kind, payload, timeout=timeout, **options)
