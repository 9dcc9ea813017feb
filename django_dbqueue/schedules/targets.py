"""What a firing enqueues: a ``django.tasks`` task, a ``Message`` or a row of a queue model.

A target is text, ``task:<module path>``, ``message:<kind>`` or ``model:<app_label.Model>``,
so a schedule row says what it runs without pickled code. :func:`resolve` turns it into the
function that enqueues one job, or raises :class:`InvalidSchedule` saying why it cannot:
the job must land in the schedule's own database, or it could not share the firing's
transaction (and "the job exists iff the firing row exists" would not hold).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import django
from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, router
from django.utils.module_loading import import_string

from ..handlers import get_handler
from ..models import Message, queue_model
from ..payloads import check_payload
from ..slots import InvalidSchedule
from ..states import QueueState
from .declare import check_arguments, split

#: Enqueue one job with the schedule's arguments and priority; return ``app_label.Model:pk``.
Enqueue = Callable[[Mapping[str, Any], int], str]


def resolve(target: str, arguments: Mapping[str, Any], using: str) -> Enqueue:
    kind, ref = split(target)
    check_arguments(kind, arguments)
    if kind == "task":
        return _task(ref, using)
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


def _task(path: str, using: str) -> Enqueue:
    if django.VERSION < (6, 0):
        raise InvalidSchedule(f"task {path!r}: django.tasks needs Django 6.0 or later")
    from django.tasks import Task

    from ..tasks import DatabaseBackend

    try:
        task = import_string(path)
    except ImportError as exc:
        raise InvalidSchedule(f"task {path!r} cannot be imported: {exc}") from None
    if not isinstance(task, Task):
        raise InvalidSchedule(f"{path} is not a django.tasks Task (no @task decorator?)")
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
            model._meta.get_field(name)
        except FieldDoesNotExist:
            raise InvalidSchedule(f"{label} has no field {name!r}") from None
    _same_database(label, model, using)

    def enqueue(arguments: Mapping[str, Any], priority: int) -> str:
        row = model(**arguments.get("fields", {}))
        row.queue_state = QueueState.READY
        row.queue_priority = priority
        row.save(using=using, force_insert=True)
        return f"{model._meta.label}:{row.pk}"

    return enqueue
