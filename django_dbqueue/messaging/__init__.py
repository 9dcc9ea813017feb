"""Messaging: messages by kind with registered handlers, topics (fan-out to consumer groups)
and request-reply (docs/messages.md, docs/messaging.md).

Modules by concept: ``handlers`` (the registry of handler kinds: ``handler``), ``payloads``
(what a payload may hold), ``message`` (the ``Message`` model, its queryset and payload
field), ``topics`` (publish to every group of a kind, replay), ``reply`` (request and wait for
a reply), ``mixin`` (``MessagingMixin``: topics and request-reply on a queue model).

The models are imported from ``django_dbqueue.models`` (where Django finds them). ``handlers``
and ``payloads`` import nothing above the foundation: the engine, flow control and schedules
stand on them, so this module imports only them and stays cheap.
"""

from __future__ import annotations

from .handlers import handler

__all__ = ["handler"]
