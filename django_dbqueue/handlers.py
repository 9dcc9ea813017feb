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


_registry: dict[str, Handler] = {}


def handler(kind: str, *, schema: Schema | None = None) -> Callable[[Callable], Callable]:
    """Register the decorated function as the handler of messages of ``kind``.

    The function receives the ``Message`` (its ``payload``, ``key``, ``queue_attempts``...).
    """
    if not NAME.match(kind):
        raise ValueError(f"handler kind {kind!r}: use 1-100 letters, digits and _ . : -")

    def register(func: Callable) -> Callable:
        existing = _registry.get(kind)
        if existing is not None and existing.func is not func:
            raise ValueError(f"a handler for {kind!r} is already registered: {existing.func!r}")
        _registry[kind] = Handler(kind=kind, func=func, schema=schema)
        return func

    return register


def get_handler(kind: str) -> Handler | None:
    return _registry.get(kind)


def kind_of(func: Callable[..., Any]) -> str | None:
    """The kind ``func`` handles, if it is a registered handler."""
    return next((h.kind for h in _registry.values() if h.func is func), None)


def unregister(kind: str) -> None:
    _registry.pop(kind, None)


def _names(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__
