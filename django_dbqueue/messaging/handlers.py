"""Handlers of ``Message`` kinds: ``@handler("email.send")``.

Modules named ``queue_handlers`` in installed apps are imported at start-up, so that is the
place for them. Importing this module touches no models.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Kinds and queue names: short, printable, safe to show and to filter on. ``\Z``, not ``$``
#: (which also matches before a trailing newline): "emails\n" is not a name.
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}\Z")

Schema = Mapping[str, type | tuple[type, ...]] | Callable[[Any], None]


class InvalidPayload(ValueError):
    """The payload does not match the handler's schema."""


@dataclass(frozen=True)
class Handler:
    kind: str
    func: Callable[[Any], Any]
    schema: Schema | None = None
    #: The subscriber group of a topic (docs/messaging.md); "" for a plain kind.
    group: str = ""

    def validate(self, payload: Any) -> None:
        """Raise InvalidPayload unless ``payload`` matches the schema.

        A mapping schema names the required keys and their types; a callable schema is
        called with the payload and raises (ValueError/TypeError) when it is invalid."""
        if self.schema is None:
            return
        if callable(self.schema):
            try:
                self.schema(payload)
            except (ValueError, TypeError) as exc:
                raise InvalidPayload(str(exc)) from exc
            return
        if not isinstance(payload, dict):
            raise InvalidPayload(f"expected a JSON object, got {type(payload).__name__}")
        problems = []
        for key, expected in self.schema.items():
            if key not in payload:
                problems.append(f"missing {key!r}")
            elif not isinstance(payload[key], expected):
                problems.append(f"{key!r} is {type(payload[key]).__name__}, expected {_names(expected)}")
        if problems:
            raise InvalidPayload("; ".join(problems))


#: By (kind, group): a topic's subscriber groups each have their own handler.
_registry: dict[tuple[str, str], Handler] = {}


def check_group(group: str) -> str:
    """A subscriber group's name, validated: its copies go to the queue of that name."""
    if not isinstance(group, str) or not NAME.match(group) or len(group) > 64:
        raise ValueError(f"subscriber group {group!r}: use 1-64 letters, digits and _ . : -")
    return group


def handler(
    kind: str, *, schema: Schema | None = None, group: str | None = None
) -> Callable[[Callable], Callable]:
    """Register the decorated function as the handler of messages of ``kind``.

    The function receives the ``Message`` (its ``payload``, ``key``, ``queue_attempts``...).
    With ``group``, ``kind`` is a topic and the function consumes that group's copies
    (``Message.objects.publish_to_topic``); what it returns is the reply to a request.
    """
    if not isinstance(kind, str) or not NAME.match(kind):
        raise ValueError(f"handler kind {kind!r}: use 1-100 letters, digits and _ . : -")
    slot = (kind, "" if group is None else check_group(group))

    def register(func: Callable) -> Callable:
        existing = _registry.get(slot)
        if existing is not None and existing.func is not func:
            raise ValueError(f"a handler for {kind!r} {slot[1]!r} is already registered: {existing.func!r}")
        _registry[slot] = Handler(kind=kind, func=func, schema=schema, group=slot[1])
        return func

    return register


def get_handler(kind: str, group: str = "") -> Handler | None:
    return _registry.get((kind, group))


def groups_of(topic: str) -> list[str]:
    """The subscriber groups declared for ``topic``, sorted (one copy of a message each)."""
    return sorted(group for kind, group in _registry if kind == topic and group)


def kind_of(func: Callable[..., Any]) -> str | None:
    """The kind ``func`` handles, if it is a registered handler."""
    return next((h.kind for h in _registry.values() if h.func is func), None)


def unregister(kind: str, group: str = "") -> None:
    _registry.pop((kind, group), None)


def _names(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__
