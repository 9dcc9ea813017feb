"""django_dbqueue: your Django database as a reliable job and message queue.

Public names live in their modules (``django_dbqueue.models.QueueMixin``,
``django_dbqueue.retry.ExponentialBackoff``, ...); importing this package stays
cheap and does not touch Django's app registry.
"""

from __future__ import annotations

__version__ = "0.1.0"
