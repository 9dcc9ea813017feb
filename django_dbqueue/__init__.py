"""django_dbqueue: your Django database as a reliable job and message queue.

Public names live in their modules (``django_dbqueue.models.QueueMixin``,
``django_dbqueue.retry.ExponentialBackoff``, ...); importing this package stays
cheap and does not touch Django's app registry.
"""

from __future__ import annotations

__version__ = "0.2.0.dev0"


def _hold_stop_signals() -> None:
    # In a ``runqueue`` process only: a SIGTERM while Django starts is remembered, not fatal
    # (see django_dbqueue.worker.startup). Cheap: no model, no Django import.
    from .worker.startup import hold_stop_signals

    hold_stop_signals()


_hold_stop_signals()


def __getattr__(name: str) -> object:
    # ``@django_dbqueue.handler("kind")`` without importing models at package import time.
    if name == "handler":
        from .messaging.handlers import handler

        return handler
    if name in ("pause", "resume", "is_paused"):  # flow control: django_dbqueue.pause("shop.Order")
        from .flow import pauses

        return getattr(pauses, name)
    raise AttributeError(f"module 'django_dbqueue' has no attribute {name!r}")
