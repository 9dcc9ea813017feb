"""What a firing enqueues: a ``django.tasks`` task, a ``Message`` or a row of a queue model.

A target is text, ``task:<module path>``, ``message:<kind>`` or ``model:<app_label.Model>``,
so a schedule row says what it runs without pickled code. :func:`resolve` turns it into the
function that enqueues one job, or raises :class:`InvalidSchedule` saying why it cannot:
the job must land in the schedule's own database, or it could not share the firing's
transaction (and "the job exists iff the firing row exists" would not hold).

A row's target is text an admin form (or anyone with the table) may have written, so it
chooses among what code allows and nothing else (:func:`allowed`): the targets of the
schedules code declares and those listed in ``DBQUEUE_SCHEDULE_TARGETS``. A task is looked up
among the Tasks this process registered; a kind among the registered handlers; a model among
the installed queue models. What the job holds goes through the same validation as code's
own enqueues: ``Task.enqueue()``, ``publish()``, ``full_clean()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import django
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import DEFAULT_DB_ALIAS, models, router
from django.utils.module_loading import import_string

from ..conf import settings
from ..messaging.handlers import NAME, get_handler
from ..messaging.message import Message
from ..messaging.payloads import check_payload
from ..queue.mixin import queue_model
from ..queue.row import QUEUE_FIELDS
from ..states import QueueState
from ..tasks.record import TaskRecord
from .declare import check_arguments, declarations, split
from .slots import InvalidSchedule

#: Enqueue one job with the schedule's arguments and priority; return ``app_label.Model:pk``.
Enqueue = Callable[[Mapping[str, Any], int], str]
TARGETS_SETTING = "DBQUEUE_SCHEDULE_TARGETS"
#: Where a target is allowed from: a declared schedule (decorator or setting) or the list.
DECORATOR, SETTING = "@schedule", "setting"


def allowed() -> dict[str, str]:
    """The allowlist: every target code lets a schedule have, and where code says so
    (``DECORATOR`` or ``SETTING``)."""
    found: dict[str, str] = {}
    declared, _problems = declarations()
    configured = settings.SCHEDULES
    for declaration in declared.values():
        in_setting = isinstance(configured, Mapping) and declaration.name in configured
        found.setdefault(declaration.target, SETTING if in_setting else DECORATOR)
    listed = settings.SCHEDULE_TARGETS
    for target in listed if isinstance(listed, (list, tuple)) else ():  # else check E053 says why
        if isinstance(target, str):
            found.setdefault(target, SETTING)
    return found


def enqueued_model(target: str) -> type[models.Model]:
    """The model a firing of ``target`` inserts a row of (whose add permission the admin
    asks for); InvalidSchedule for a target of no such model."""
    kind, ref = split(target)
    if kind == "task":
        return TaskRecord
    if kind == "message":
        return Message
    try:
        return queue_model(ref)
    except ValueError as exc:
        raise InvalidSchedule(str(exc)) from None


def resolve(target: str, arguments: Mapping[str, Any], using: str) -> Enqueue:
    kind, ref = split(target)
    check_arguments(kind, arguments)
    source = allowed().get(target)
    if source is None:
        raise InvalidSchedule(
            f"target {target!r} is not declared in code: a schedule runs a target of a declared "
            f"schedule (@schedule, DBQUEUE_SCHEDULES) or one listed in {TARGETS_SETTING}"
        )
    if kind == "task":
        return _task(ref, using, importable=source == SETTING)
    if kind == "message":
        return _message(ref, arguments, using)
    return _model(ref, arguments, using)


def _same_database(label: str, model: type, using: str) -> None:
    theirs = router.db_for_write(model) or DEFAULT_DB_ALIAS
    if theirs != using:
        raise InvalidSchedule(
            f"{label} is written to database {theirs!r}, the schedules to {using!r}: a firing and "
            "its job must share one transaction"
        )


def _task(path: str, using: str, importable: bool) -> Enqueue:
    """``importable``: the path is written in a setting, which may name a task module nothing
    imported yet (settings are code, like MIDDLEWARE's paths); a path the decorator declared
    was registered when its module ran."""
    if django.VERSION < (6, 0):
        raise InvalidSchedule(f"task {path!r}: django.tasks needs Django 6.0 or later")
    from django.tasks import Task

    from ..tasks.backend import DatabaseBackend, registered_task

    task = registered_task(path)
    if task is None and importable:
        try:
            task = import_string(path)
        except ImportError as exc:
            raise InvalidSchedule(f"task {path!r} cannot be imported: {exc}") from None
    if not isinstance(task, Task):
        raise InvalidSchedule(f"{path} is not a django.tasks Task of this process (no @task decorator?)")
    try:
        backend = task.get_backend()
    except Exception as exc:  # noqa: BLE001 - e.g. an alias missing from TASKS
        raise InvalidSchedule(f"task {path}: its backend {task.backend!r}: {exc}") from None
    if not isinstance(backend, DatabaseBackend):
        raise InvalidSchedule(
            f"task {path} goes to backend {task.backend!r} ({type(backend).__name__}); a scheduled task "
            "needs django_dbqueue.tasks.DatabaseBackend, so the firing and the task commit together"
        )
    if backend._db() != using:
        raise InvalidSchedule(
            f"task {path}: its backend writes to {backend._db()!r}, the schedules to {using!r}"
        )

    def enqueue(arguments: Mapping[str, Any], priority: int) -> str:
        result = task.using(priority=priority).enqueue(
            *arguments.get("args", []), **arguments.get("kwargs", {})
        )
        return f"django_dbqueue.TaskRecord:{result.id}"

    return enqueue


def _message(kind: str, arguments: Mapping[str, Any], using: str) -> Enqueue:
    if get_handler(kind) is None:
        raise InvalidSchedule(f"no handler is registered for message kind {kind!r}")
    queue = arguments.get("queue", "default")
    if not isinstance(queue, str) or not NAME.match(queue) or len(queue) > 64:  # as publish() checks
        raise InvalidSchedule(f"queue name {queue!r}: use 1-64 letters, digits and _ . : -")
    try:
        check_payload(arguments.get("payload"), kind)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(str(exc)) from None
    _same_database("Message", Message, using)

    def enqueue(arguments: Mapping[str, Any], priority: int) -> str:
        published = Message.objects.using(using).publish(
            kind, arguments.get("payload"), queue=arguments.get("queue", "default"), priority=priority
        )
        assert published is not None  # not on_commit: published now
        return f"django_dbqueue.Message:{published.message.pk}"

    return enqueue


def _model(label: str, arguments: Mapping[str, Any], using: str) -> Enqueue:
    try:
        model = queue_model(label)
    except ValueError as exc:
        raise InvalidSchedule(str(exc)) from None
    for name in arguments.get("fields", {}):
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:
            raise InvalidSchedule(f"{label} has no field {name!r}") from None
        # The queue columns are the queue's (a firing enqueues, the claim protocol runs the
        # row); a field no form could set is not the schedule's to set either.
        if name in QUEUE_FIELDS or not getattr(field, "editable", False) or not field.concrete:
            raise InvalidSchedule(f"{label}.{name} is not a field a schedule may set")
    _same_database(label, model, using)
    # What the row would hold is validated now, as a form would (no unique checks: those read
    # the table, and the insert's own constraint decides at firing time).
    _valid_row(model, label, arguments, unique=False)

    def enqueue(arguments: Mapping[str, Any], priority: int) -> str:
        row = _valid_row(model, label, arguments, unique=True)
        row.queue_state = QueueState.READY
        row.queue_priority = priority
        row.save(using=using, force_insert=True)
        return f"{model._meta.label}:{row.pk}"

    return enqueue


def _valid_row(model: type[Any], label: str, arguments: Mapping[str, Any], *, unique: bool) -> Any:
    """A new ``model`` row with the schedule's fields, through ``full_clean()``."""
    try:
        row = model(**arguments.get("fields", {}))
        row.full_clean(exclude=list(QUEUE_FIELDS), validate_unique=unique, validate_constraints=unique)
    except ValidationError as exc:
        raise InvalidSchedule(f"{label}: {'; '.join(exc.messages)}") from None
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"{label}: {exc}") from None
    return row
