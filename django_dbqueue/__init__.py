"""django_dbqueue: your Django database as a reliable job and message queue.

Public names live in their modules (``django_dbqueue.models.QueueMixin``,
``django_dbqueue.retry.ExponentialBackoff``, ...); importing this package stays
cheap and does not touch Django's app registry.
"""

from __future__ import annotations

__version__ = "0.2.0.dev0"


def __getattr__(name: str) -> object:
    # ``@django_dbqueue.handler("kind")`` without importing models at package import time.
    if name == "handler":
        from .handlers import handler

        return handler
    if name in ("pause", "resume", "is_paused"):  # flow control: django_dbqueue.pause("shop.Order")
        from . import pauses

        return getattr(pauses, name)
    raise AttributeError(f"module 'django_dbqueue' has no attribute {name!r}")
