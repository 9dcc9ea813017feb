"""A ``django.tasks`` backend on django_dbqueue (Django >= 6.0)::

    TASKS = {"default": {"BACKEND": "django_dbqueue.tasks.DatabaseBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"database": "default"}}}

Tasks are ``TaskRecord`` rows consumed by ``manage.py runqueue`` with the same claims,
leases, fencing and outcomes as every queue model. Like Django's own backends, a task that
raises ends FAILED; retries are opt-in, for all tasks (``DBQUEUE_TASK_RETRY``) or for one::

    from django_dbqueue.retry import ExponentialBackoff
    from django_dbqueue.tasks import retry

    @retry(ExponentialBackoff(max_attempts=5))
    @task
    def send_invoice(invoice_id): ...
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.checks import CheckMessage
from django.db import DEFAULT_DB_ALIAS, router, transaction
from django.dispatch import receiver
from django.tasks import task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils.json import normalize_json

from ..exceptions import Discard, ReplyTimeout
from ..messaging.payloads import check_texts
from ..messaging.reply import FIRST_POLL, LAST_POLL, check_timeout, refuse_in_transaction
from ..queue.mixin import app_missing
from ..retry import RetryPolicy
from ..signals import job_cancelled, job_failed, job_succeeded
from ..states import QueueState
from .record import TASK_RETRY_POLICIES, TaskRecord, new_result_id
from .registry import register, registered_task

logger = logging.getLogger("django_dbqueue.tasks")

STATUS = {
    QueueState.IDLE: TaskResultStatus.READY,
    QueueState.READY: TaskResultStatus.READY,
    QueueState.RUNNING: TaskResultStatus.RUNNING,
    QueueState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    QueueState.FAILED: TaskResultStatus.FAILED,
    QueueState.CANCELLED: TaskResultStatus.FAILED,
}


def retry(policy: RetryPolicy) -> Any:
    """Give one task a retry policy: ``@retry(ExponentialBackoff(...))`` above ``@task``."""

    def register(task: Task) -> Task:
        if not isinstance(task, Task):
            raise TypeError(f"@retry() goes above @task, on a Task, not on {task!r}")
        TASK_RETRY_POLICIES[task.module_path] = policy
        return task

    return register


def wait(result: TaskResult, timeout: float) -> TaskResult:
    """Block until ``result`` has finished (refreshing it from the database), and return it.

    Django's ``TaskResult`` offers ``refresh()`` but no wait, and it is a frozen dataclass, so
    this is a function rather than a ``result.wait()`` that a later Django could clash with.
    Polls by primary key, 5 ms at first, backing off to 50 ms. Raises ``ReplyTimeout``
    (a ``TimeoutError``) after ``timeout`` seconds; the task itself is left as it is."""
    check_timeout(timeout)
    refuse_in_transaction(_result_db(result), "tasks.wait()")
    deadline, pause = time.monotonic() + timeout, FIRST_POLL
    while True:
        result.refresh()
        if result.is_finished:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            raise ReplyTimeout(f"task {result.task.name} ({result.id}) did not finish within {timeout}s")
        time.sleep(min(left, pause))
        pause = min(pause * 1.5, LAST_POLL)


def _result_db(result: TaskResult) -> str:
    backend = result.task.get_backend()
    return backend._db() if isinstance(backend, DatabaseBackend) else DEFAULT_DB_ALIAS


class DatabaseBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str | None = self.options.get("database")

    def _db(self) -> str:
        return self.database or router.db_for_write(TaskRecord) or DEFAULT_DB_ALIAS

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        # Django loads this backend from TASKS whatever INSTALLED_APPS says (issue #31).
        used = f"TASKS[{self.alias!r}] uses django_dbqueue.tasks.DatabaseBackend"
        return [*super().check(**kwargs), *app_missing(used)]

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        # The first one is the @task declaration; .using() copies share its function.
        register(task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args, kwargs = stored_arguments(task.module_path, args, kwargs)
        record = TaskRecord(
            id=new_result_id(),
            task_path=task.module_path,
            queue=task.queue_name,
            backend=self.alias,
            args=args,
            kwargs=kwargs,
            takes_context=task.takes_context,
            queue_priority=task.priority,
            run_after=task.run_after,
        )
        if task.run_after is not None:
            record.queue_run_at = task.run_after
        using = self._db()
        record.save(using=using, force_insert=True)
        result = to_task_result(record, task)
        # Enqueued means committed: inside a transaction, listeners hear of it at commit.
        transaction.on_commit(lambda: task_enqueued.send(type(self), task_result=result), using=using)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            record = TaskRecord.objects.using(self._db()).get(pk=result_id)
        except (TaskRecord.DoesNotExist, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        return to_task_result(record)


def stored_arguments(task_path: str, args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` as a record stores them, or the caller's ``TypeError`` /
    ``ValueError``: what ``enqueue()`` checks, and what the dead-letter console checks an
    edited replay's arguments with."""
    args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
    # Text no database stores as given (NUL, a lone surrogate) is the caller's ValueError
    # here, not a DataError from the INSERT (the payload checks of Message.publish).
    check_texts([args, kwargs], f"the arguments of task {task_path}")
    return args, kwargs


def task_of(record: TaskRecord) -> Task:
    """The task a record runs, as it was enqueued; ``Discard`` (with the reason) when the
    record can no longer become one: no retry can bring back a renamed function."""
    task = registered_task(record.task_path)
    if task is None:
        raise Discard(
            f"task {record.task_path!r} is not a registered django.tasks Task of this process "
            "(no @task for a DatabaseBackend, or its module is not imported at start-up)"
        )
    try:
        task = task.using(
            priority=record.queue_priority,
            queue_name=record.queue,
            run_after=record.run_after,
            backend=record.backend,
        )
        task_backends[record.backend].validate_task(task)
    except (InvalidTask, ValueError) as exc:
        raise Discard(f"{record.task_path}: {exc}") from exc
    except Exception as exc:  # e.g. the backend alias left TASKS
        raise Discard(f"{record.task_path}: backend {record.backend!r}: {exc}") from exc
    return task


def to_task_result(record: TaskRecord, task: Task | None = None) -> TaskResult:
    worker_ids = list(record.worker_ids)
    started_at = record.started_at
    if record.queue_state == QueueState.RUNNING:
        # A running task's own columns commit with its outcome; its claim is committed.
        if record.queue_locked_by and (not worker_ids or worker_ids[-1] != record.queue_locked_by):
            worker_ids.append(record.queue_locked_by)
        started_at = started_at or record.queue_last_attempt_at
    result: TaskResult[Any, Any] = TaskResult(
        task=task or task_of(record),
        id=record.pk,
        status=STATUS[QueueState(record.queue_state)],
        enqueued_at=record.queue_enqueued_at,
        started_at=started_at,
        finished_at=record.queue_finished_at,
        last_attempted_at=record.queue_last_attempt_at,
        args=record.args,
        kwargs=record.kwargs,
        backend=record.backend,
        errors=[TaskError(**error) for error in record.errors],
        worker_ids=worker_ids,
    )
    object.__setattr__(result, "_return_value", record.return_value)
    return result


def run_record(record: TaskRecord) -> None:
    """The handler of a TaskRecord: call its task and keep the return value (runs inside the
    transaction that records the outcome)."""
    claim = record.queue_claim()
    task = task_of(record)
    record.worker_ids = [*record.worker_ids, claim.worker_id]
    record.started_at = record.started_at or claim.claimed_at
    result = to_task_result(record, task)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(DatabaseBackend, task_result=result)
    if task.takes_context:  # the code's declaration, not the row's copy of it
        value = task.call(TaskContext(task_result=result), *record.args, **record.kwargs)
    else:
        value = task.call(*record.args, **record.kwargs)
    record.return_value = normalize_json(value)
    record.save(update_fields=["return_value", "worker_ids", "started_at"])


TaskRecord.runner = run_record


def _finished(row: TaskRecord, error: BaseException | None = None) -> None:
    try:
        result = to_task_result(row)
    except Discard as exc:
        # A record that cannot become a task has no TaskResult to announce.
        logger.error("task %s (%s) finished, but %s", row.pk, row.task_path, exc)
        return
    if error is None:
        task_finished.send(DatabaseBackend, task_result=result)
        return
    # Receivers (Django's own log line among them) read the error from sys.exc_info(), as
    # backends send the signal from their exception handler.
    try:
        raise error
    except BaseException:  # noqa: BLE001 - re-raised only to be the current exception
        task_finished.send(DatabaseBackend, task_result=result)


@receiver(job_succeeded, sender=TaskRecord, dispatch_uid="django_dbqueue.tasks.finished_ok")
def _finished_ok(sender: Any, row: TaskRecord, **kwargs: Any) -> None:
    _finished(row)


@receiver(job_failed, sender=TaskRecord, dispatch_uid="django_dbqueue.tasks.finished_failed")
def _finished_failed(sender: Any, row: TaskRecord, error: Any, retry_at: Any, **kwargs: Any) -> None:
    if retry_at is None:  # a retry is not the end of the task
        _finished(row, error if isinstance(error, BaseException) else RuntimeError(str(error)))


@receiver(job_cancelled, sender=TaskRecord, dispatch_uid="django_dbqueue.tasks.finished_cancelled")
def _finished_cancelled(sender: Any, row: TaskRecord, reason: str, **kwargs: Any) -> None:
    # Ended by an operator's request, by any path: the task is over, so its finish is announced
    # (status FAILED, as django.tasks has no cancelled status) with the request as its error.
    _finished(row, RuntimeError(reason))
