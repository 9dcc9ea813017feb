"""System checks: catch misconfiguration at ``manage.py check`` time, not in production."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, cast

from django.conf import settings as django_settings
from django.core import checks
from django.db import connections

from . import limits, unique
from .backends import backend_for
from .models import CLAIM_INDEX_FIELDS, QUEUE_FIELDS, QueueMixin, queue_models
from .retry import RetryPolicy
from .settings_checks import check_settings  # noqa: F401 - registers the settings checks


@checks.register(checks.Tags.models)
def check_queue_models(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    if not django_settings.USE_TZ:
        errors.append(
            checks.Error(
                "django_dbqueue needs USE_TZ = True: queue times are compared on the database clock in UTC.",
                id="django_dbqueue.E001",
            )
        )
    wanted = {a.label for a in app_configs} if app_configs else None
    for model in queue_models():
        if wanted is not None and model._meta.app_label not in wanted:
            continue
        errors.extend(_check_model(model))
    return errors


def _check_model(model: type[QueueMixin]) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    label = model._meta.label
    # A proxy shares its concrete model's table, and so its index.
    index_owner = cast(type[QueueMixin], model._meta.concrete_model)  # None only on abstract models
    if not any(
        tuple(index.fields[: len(CLAIM_INDEX_FIELDS)]) == CLAIM_INDEX_FIELDS
        for index in index_owner._meta.indexes
    ):
        errors.append(
            checks.Error(
                f"{label} lost QueueMixin's claim index: without it every claim scans (and on "
                "MySQL locks) the whole table.",
                hint="Declare 'class Meta(QueueMixin.Meta):', or add "
                f"models.Index(fields={list(CLAIM_INDEX_FIELDS)!r}) to Meta.indexes.",
                obj=model,
                id="django_dbqueue.E002",
            )
        )
    for name in QUEUE_FIELDS:
        ours = QueueMixin._meta.get_field(name)
        theirs = model._meta.get_field(name)
        if type(theirs) is not type(ours) or theirs.null != ours.null:
            errors.append(
                checks.Error(
                    f"{label}.{name} clashes with the column QueueMixin adds "
                    f"({type(ours).__name__}, null={ours.null}).",
                    hint="Rename the model's own field; queue_* names belong to the queue.",
                    obj=model,
                    id="django_dbqueue.E003",
                )
            )
    if not isinstance(model.queue_retry, RetryPolicy):
        errors.append(
            checks.Error(
                f"{label}.queue_retry must be a retry policy (e.g. ExponentialBackoff()), "
                f"not {model.queue_retry!r}.",
                obj=model,
                id="django_dbqueue.E004",
            )
        )
    for attr in ("queue_lease", "queue_timeout"):
        value = getattr(model, attr)
        if value is None:
            continue
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            errors.append(
                checks.Error(
                    f"{label}.{attr} must be a positive number of seconds or a timedelta, not {value!r}.",
                    obj=model,
                    id="django_dbqueue.E005",
                )
            )
    errors.extend(_check_unique(model))
    errors.extend(checks.Error(text, obj=model, id="django_dbqueue.E030") for text in limits.problems(model))
    if inspect.isgeneratorfunction(model.process):
        errors.append(
            checks.Error(
                f"{label}.process() is a generator function: calling it runs none of its body, so "
                "its rows would fail.",
                hint="Remove the 'yield'; an 'async def process()' is run by the worker.",
                obj=model,
                id="django_dbqueue.E007",
            )
        )
    if model.process is QueueMixin.process:
        errors.append(
            checks.Warning(
                f"{label} does not implement process(): a worker fails each of its rows at once "
                "(people can still take them in the admin).",
                obj=model,
                id="django_dbqueue.W001",
            )
        )
    return errors


def _check_unique(model: type[QueueMixin]) -> list[checks.CheckMessage]:
    """A duplicate policy needs the key column, and must be one that exists."""
    label, policy = model._meta.label, getattr(model, "queue_unique", None)
    if policy is None:
        return []
    if policy not in unique.POLICIES:
        return [
            checks.Error(
                f"{label}.queue_unique is {policy!r}, not a duplicate policy.",
                hint=f"Use one of {', '.join(map(repr, unique.POLICIES))}.",
                obj=model,
                id="django_dbqueue.E040",
            )
        ]
    if unique.key_field(model) is None:
        return [
            checks.Error(
                f"{label} sets queue_unique but has no unique key column: nothing would stop a duplicate.",
                hint=f"Declare {unique.KEY_FIELD} = QueueUniqueKey('field', ...) "
                "(from django_dbqueue.unique) and make a migration.",
                obj=model,
                id="django_dbqueue.E041",
            )
        ]
    return []


@checks.register(checks.Tags.database)
def check_databases(databases: Iterable[str] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """SKIP LOCKED is what lets workers claim without waiting on each other."""
    errors: list[checks.CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if not backend_for(alias).skip_locked:
            continue  # SQLite: one writer at a time, claims are compare-and-set
        connection.ensure_connection()
        if connection.features.has_select_for_update_skip_locked:
            continue
        errors.append(
            checks.Error(
                f"Database '{alias}' ({connection.display_name}) has no SELECT ... FOR UPDATE SKIP "
                "LOCKED; django_dbqueue needs MySQL >= 8.0.1, MariaDB >= 10.6 or PostgreSQL.",
                id="django_dbqueue.E010",
            )
        )
    return errors


@checks.register()
def check_schedules(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every declared schedule: its timing, time zone, catch-up policy and target (E050)."""
    from .schedules import declarations, targets
    from .schedules.firing import database

    declared, problems = declarations()
    for declaration in declared.values():
        try:
            targets.resolve(declaration.target, declaration.arguments, database())
        except ValueError as exc:  # InvalidSchedule
            problems[declaration.name] = f"{declaration.name}: {exc}"
    return [
        checks.Error(f"schedule {problem}", hint="See docs/schedules.md.", id="django_dbqueue.E050")
        for problem in problems.values()
    ]
