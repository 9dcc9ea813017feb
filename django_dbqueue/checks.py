"""System checks: catch misconfiguration at ``manage.py check`` time, not in production."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, cast

import django
from django.apps import apps
from django.conf import settings as django_settings
from django.core import checks
from django.db import connections

from .backends import backend_for
from .fairness import options as fairness
from .flow import limits, unique
from .models import CLAIM_INDEX_FIELDS, QUEUE_FIELDS, QueueMixin, queue_models
from .retry import RetryPolicy
from .settings_checks import check_settings  # noqa: F401 - registers the settings checks
from .worker.sizing import atomic_group

#: The index aging reads its longest-waiting rows from (docs/fair-share.md).
AGING_INDEX_FIELDS = ("queue_state", "queue_run_at")


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
    errors.extend(_check_optimistic_group(model))
    errors.extend(_check_unique(model))
    errors.extend(checks.Error(text, obj=model, id="django_dbqueue.E030") for text in limits.problems(model))
    errors.extend(
        checks.Error(text, obj=model, id="django_dbqueue.E050") for text in fairness.problems(model)
    )
    errors.extend(_check_aging_index(model))
    errors.extend(_check_fair_indexes(model))
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


def _check_optimistic_group(model: type[QueueMixin]) -> list[checks.CheckMessage]:
    """``queue_atomic_group_optimistic`` is a bool (``"no"`` would count as true), and only
    means something for an atomic model whose groups hold more than one job."""
    value = model.queue_atomic_group_optimistic
    label = model._meta.label
    if not isinstance(value, bool):
        return [
            checks.Error(
                f"{label}.queue_atomic_group_optimistic must be True or False, not {value!r}.",
                obj=model,
                id="django_dbqueue.E009",
            )
        ]
    if value and atomic_group(model) == 1:
        return [
            checks.Warning(
                f"{label}.queue_atomic_group_optimistic has no effect: its jobs run one per transaction.",
                hint="Set queue_atomic = True and queue_atomic_group above 1, or remove it.",
                obj=model,
                id="django_dbqueue.W003",
            )
        ]
    return []


def _check_aging_index(model: type[QueueMixin]) -> list[checks.CheckMessage]:
    """Aging takes the longest-waiting rows first: without an index that starts with
    ``(queue_state, queue_run_at)`` that read sorts every due row (and MySQL locks what it reads)."""
    if getattr(model, "queue_aging", None) is None or getattr(model, "queue_fair_key", None) is not None:
        return []  # no aging, or aging inside the fair ranking (which reads the due rows anyway)
    owner = model._meta.concrete_model
    assert owner is not None
    if any(tuple(index.fields[:2]) == AGING_INDEX_FIELDS for index in owner._meta.indexes):
        return []
    return [
        checks.Warning(
            f"{model._meta.label}.queue_aging has no index to read the longest-waiting rows from: each "
            "claim sorts every due row.",
            hint=f"Add models.Index(fields={list(AGING_INDEX_FIELDS)!r}) to Meta.indexes (Meta inheriting "
            "QueueMixin.Meta).",
            obj=model,
            id="django_dbqueue.W050",
        )
    ]


def fair_indexes(key: str) -> list[list[str]]:
    """The fields of the two indexes the bounded fair claim reads (fairness/bounded.py): each
    key's first due rows in claim order, and the keys with work, all ascending (MariaDB's
    loose index scan takes no index with a descending part)."""
    return [["queue_state", key, "-queue_priority", "queue_run_at", "id"], ["queue_state", key]]


def _check_fair_indexes(model: type[QueueMixin]) -> list[checks.CheckMessage]:
    """A fair key without the indexes its claim reads makes every claim read every READY row."""
    fair = fairness.fair_share_of(model) if not fairness.problems(model) else None
    if fair is None or fair.key is None:
        return []
    owner = model._meta.concrete_model
    assert owner is not None
    key = model._meta.get_field(fair.key).name
    declared = [list(index.fields) for index in owner._meta.indexes]
    heads, keys = fair_indexes(key)
    has_heads = any(fields[:4] == heads[:4] for fields in declared)
    has_keys = any(fields[:2] == keys and not any(f.startswith("-") for f in fields) for fields in declared)
    if has_heads and has_keys:
        return []
    return [
        checks.Warning(
            f"{model._meta.label}.queue_fair_key has not the indexes a fair claim reads its keys and "
            "their first rows from: each claim reads every READY row.",
            hint=f"Add models.Index(fields={heads!r}) and models.Index(fields={keys!r}) to Meta.indexes "
            "(Meta inheriting QueueMixin.Meta).",
            obj=model,
            id="django_dbqueue.W051",
        )
    ]


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
                "(from django_dbqueue.flow) and make a migration.",
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


@checks.register()
def check_installed_apps(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The queue's admin pages render django-admin-rangefilter's templates (the date and number
    range filters): without ``rangefilter`` in ``INSTALLED_APPS`` ``check`` would pass and the
    first changelist would crash with ``TemplateDoesNotExist`` (E008)."""
    if not apps.is_installed("django.contrib.admin") or apps.is_installed("rangefilter"):
        return []
    return [
        checks.Error(
            "django_dbqueue's admin needs 'rangefilter' (django-admin-rangefilter) in INSTALLED_APPS: "
            "without it every queue changelist fails with TemplateDoesNotExist.",
            hint="Add 'rangefilter' to INSTALLED_APPS (it is installed with django-dbqueue).",
            id="django_dbqueue.E008",
        )
    ]


@checks.register()
def check_database_settings(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Settings of a database the queue works badly with (W002: SQLite without IMMEDIATE
    transactions). Read from ``DATABASES`` only, so it runs without a connection."""
    warnings: list[checks.CheckMessage] = []
    for alias in connections:
        problem = backend_for(alias).configuration_warning()
        if problem:
            warnings.append(
                checks.Warning(
                    problem,
                    hint=f"Set DATABASES[{alias!r}]['OPTIONS'] = "
                    '{"transaction_mode": "IMMEDIATE", "timeout": 30} (see docs/reference/databases.md).',
                    id="django_dbqueue.W002",
                )
            )
    return warnings


@checks.register()
def check_tasks_setting(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``TASKS`` on a Django without ``django.tasks`` (5.2): Django ignores it without a word (W060).

    The ``django-tasks`` backport reads the same setting, so it is only named when it is absent or
    when a backend of ours is configured (``django_dbqueue.tasks`` needs Django's own module)."""
    tasks = getattr(django_settings, "TASKS", None)
    if not tasks:
        return []
    try:
        importlib.import_module("django.tasks")  # Django >= 6.0
    except ImportError:
        pass
    else:
        return []
    ours = any("django_dbqueue" in str(alias.get("BACKEND", "")) for alias in dict(tasks).values())
    if not ours and "django_tasks" in django_settings.INSTALLED_APPS:
        return []  # the backport's own backends read TASKS
    return [
        checks.Warning(
            f"TASKS is set, but Django {django.get_version()} has no django.tasks: nothing reads it "
            "and no task is ever enqueued.",
            hint="django.tasks is new in Django 6.0: upgrade to Django 6.0+ to use "
            "django_dbqueue.tasks.DatabaseBackend; on Django 5.2, the django-tasks backport "
            "(pip install django-tasks) has backends of its own. Or remove TASKS.",
            id="django_dbqueue.W060",
        )
    ]
