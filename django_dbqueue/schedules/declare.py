"""Schedules declared in code: the ``@schedule`` decorator and the ``DBQUEUE_SCHEDULES`` setting.

::

    @schedule(cron="30 2 * * *", timezone="Europe/Berlin")   # above @task
    @task
    def nightly_report(): ...

    @schedule(every=timedelta(minutes=5), name="cleanup")    # a plain function: it becomes the
    def cleanup(message): ...                                # handler of Message kind schedule.cleanup

    DBQUEUE_SCHEDULES = {
        "digest": {"message": "email.digest", "every": 3600, "catch_up": "all", "catch_up_limit": 24},
        "sync": {"model": "shop.SyncRun", "cron": "*/5 * * * *", "fields": {"source": "erp"}},
    }

Decorated functions must be imported at start-up (a ``queue_handlers`` module is; import
your task module from there). ``runqueue`` copies the declarations to the ``Schedule`` table
when it starts (syncing.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings as django_settings

from ..conf import settings
from ..messaging.handlers import NAME, handler, kind_of
from .slots import CatchUp, InvalidSchedule, Timing, seconds_of

T = TypeVar("T")
#: Keys of a DBQUEUE_SCHEDULES entry (one target key, one timing key, the rest optional).
KEYS = {
    "task", "message", "model", "cron", "every", "timezone", "catch_up", "catch_up_limit",
    "priority", "enabled", "args", "kwargs", "payload", "queue", "fields",
}  # fmt: skip
MAX_CATCH_UP = 10_000
SETTING = "DBQUEUE_SCHEDULES"


KINDS = ("task", "message", "model")


def split(target: object) -> tuple[str, str]:
    if not isinstance(target, str) or ":" not in target:
        raise InvalidSchedule(
            f"target {target!r}: use 'task:<module path>', 'message:<kind>' or 'model:<app_label.Model>'"
        )
    kind, _, ref = target.partition(":")
    if kind not in KINDS or not ref:
        raise InvalidSchedule(f"target {target!r}: the kind must be one of {', '.join(KINDS)}")
    return kind, ref


def check_arguments(kind: str, arguments: object) -> None:
    """The arguments a target of ``kind`` takes, as JSON (InvalidSchedule otherwise)."""
    allowed = {"task": {"args", "kwargs"}, "message": {"payload", "queue"}, "model": {"fields"}}[kind]
    if not isinstance(arguments, Mapping) or set(arguments) - allowed:
        raise InvalidSchedule(f"a {kind} target takes arguments {sorted(allowed)}, not {arguments!r}")
    try:
        json.dumps(arguments, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"arguments must be JSON: {exc}") from None
    if not isinstance(arguments.get("args", []), list) or not isinstance(arguments.get("kwargs", {}), dict):
        raise InvalidSchedule("a task target's args must be a list and its kwargs a dict")
    if kind == "model" and not isinstance(arguments.get("fields", {}), dict):
        raise InvalidSchedule("a model target's fields must be a dict of field names to values")


@dataclass(frozen=True)
class Declaration:
    """One schedule as code declares it (validated, but its target not yet resolved)."""

    name: str
    target: str
    timing: Timing
    arguments: Mapping[str, Any] = field(default_factory=dict)
    catch_up: CatchUp = CatchUp.LATEST
    catch_up_limit: int = 10
    priority: int = 0
    enabled: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise InvalidSchedule(f"schedule name {self.name!r}: use 1-100 letters, digits and _ . : -")
        kind, _ = split(self.target)
        check_arguments(kind, self.arguments)
        try:
            object.__setattr__(self, "catch_up", CatchUp(self.catch_up))
        except ValueError:
            raise InvalidSchedule(
                f"{self.name}: catch_up must be one of {[c.value for c in CatchUp]}, not {self.catch_up!r}"
            ) from None
        limit = self.catch_up_limit
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_CATCH_UP:
            raise InvalidSchedule(f"{self.name}: catch_up_limit must be an int from 1 to {MAX_CATCH_UP}")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise InvalidSchedule(f"{self.name}: priority must be an integer, not {self.priority!r}")
        if not isinstance(self.enabled, bool):
            raise InvalidSchedule(f"{self.name}: enabled must be True or False, not {self.enabled!r}")

    def row_values(self) -> dict[str, Any]:
        """The Schedule columns this declaration sets."""
        return {
            "cron": self.timing.cron,
            "every": self.timing.every,
            "timezone": self.timing.timezone,
            "catch_up": self.catch_up.value,
            "catch_up_limit": self.catch_up_limit,
            "target": self.target,
            "arguments": dict(self.arguments),
            "priority": self.priority,
            "enabled": self.enabled,
        }


def timing(cron: str | None, every: int | float | timedelta | None, timezone: str | None) -> Timing:
    seconds = None if every is None else seconds_of(every)
    return Timing(cron=cron or "", every=seconds, timezone=timezone or django_settings.TIME_ZONE or "UTC")


#: Declarations made by the decorator, by name.
_decorated: dict[str, Declaration] = {}


def schedule(
    *,
    cron: str | None = None,
    every: int | float | timedelta | None = None,
    timezone: str | None = None,
    name: str | None = None,
    catch_up: str = CatchUp.LATEST,
    catch_up_limit: int = 10,
    priority: int = 0,
    enabled: bool = True,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    payload: Any = None,
    queue: str = "default",
) -> Callable[[T], T]:
    """Run a ``django.tasks`` task, a ``@handler`` or a plain function on a schedule.

    A task is enqueued with ``args``/``kwargs``; a handler's kind (or, for a plain function,
    the kind ``schedule.<name>``, registered here) is published with ``payload``/``queue``.
    Bad input raises :class:`InvalidSchedule` at import time, naming what is wrong."""
    when = timing(cron, every, timezone)

    def register(obj: T) -> T:
        module_path = getattr(obj, "module_path", None)  # a django.tasks Task
        if isinstance(module_path, str):
            target, arguments = f"task:{module_path}", {"args": list(args), "kwargs": dict(kwargs or {})}
            label = name or module_path
        elif callable(obj):
            label = name or f"{obj.__module__}.{getattr(obj, '__qualname__', obj)}"
            kind = kind_of(obj)
            if kind is None:
                kind = f"schedule.{label}"
                try:
                    handler(kind)(obj)
                except ValueError as exc:
                    raise InvalidSchedule(str(exc)) from None
            target, arguments = f"message:{kind}", {"payload": payload, "queue": queue}
        else:
            raise InvalidSchedule(f"@schedule() goes on a django.tasks task or a function, not {obj!r}")
        declared = Declaration(
            label, target, when, arguments, CatchUp(catch_up), catch_up_limit, priority, enabled
        )
        existing = _decorated.get(label)
        if existing is not None and existing != declared:
            raise InvalidSchedule(f"schedule {label!r} is declared twice")
        _decorated[label] = declared
        return obj

    return register


def from_setting(name: str, spec: object) -> Declaration:
    """A ``DBQUEUE_SCHEDULES`` entry as a Declaration, or InvalidSchedule naming the problem."""
    if not isinstance(spec, Mapping):
        raise InvalidSchedule(f"{name}: a schedule is a dict (target, cron or every, ...), not {spec!r}")
    unknown = set(spec) - KEYS
    if unknown:
        raise InvalidSchedule(f"{name}: unknown keys {sorted(unknown)}; known: {sorted(KEYS)}")
    kinds = [kind for kind in KINDS if kind in spec]
    if len(kinds) != 1:
        raise InvalidSchedule(f"{name}: give exactly one target: 'task', 'message' or 'model'")
    kind = kinds[0]
    wanted = {"task": ("args", "kwargs"), "message": ("payload", "queue"), "model": ("fields",)}[kind]
    arguments = {key: spec[key] for key in wanted if key in spec}
    try:
        when = timing(spec.get("cron"), spec.get("every"), spec.get("timezone"))
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"{name}: {exc}") from None
    return Declaration(
        name,
        f"{kind}:{spec[kind]}",
        when,
        arguments,
        spec.get("catch_up", CatchUp.LATEST),
        spec.get("catch_up_limit", 10),
        spec.get("priority", 0),
        spec.get("enabled", True),
    )


def declarations() -> tuple[dict[str, Declaration], dict[str, str]]:
    """Every schedule code declares, by name; and the problems of those that are invalid
    (left out), by name. The setting and the decorator may not both declare one name."""
    found = dict(_decorated)
    problems: dict[str, str] = {}
    configured = settings.SCHEDULES
    if not isinstance(configured, Mapping):
        problems[SETTING] = f"{SETTING} must be a dict of schedules by name, not {configured!r}"
        return found, problems
    for name, spec in configured.items():
        try:
            declared = from_setting(name, spec)
        except InvalidSchedule as exc:
            problems[str(name)] = str(exc)
            continue
        if name in found:
            problems[name] = f"{name}: declared both in {SETTING} and by @schedule"
            continue
        found[name] = declared
    return found, problems
