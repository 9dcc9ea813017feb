"""A ``django.tasks`` backend on django_dbqueue (Django >= 6.0)::

    TASKS = {"default": {"BACKEND": "django_dbqueue.tasks.DatabaseBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"database": "default"}}}

Tasks are ``TaskRecord`` rows consumed by ``manage.py runqueue`` with the same claims,
leases, fencing and retries as every queue model (``DBQUEUE_TASK_RETRY`` sets the policy).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DEFAULT_DB_ALIAS, router, transaction
from django.dispatch import receiver
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from .models import TaskRecord
from .models.task_record import new_result_id
from .signals import job_failed, job_succeeded
from .states import QueueState

logger = logging.getLogger("django_dbqueue.tasks")

STATUS = {
    QueueState.IDLE: TaskResultStatus.READY,
    QueueState.READY: TaskResultStatus.READY,
    QueueState.RUNNING: TaskResultStatus.RUNNING,
    QueueState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    QueueState.FAILED: TaskResultStatus.FAILED,
    QueueState.CANCELLED: TaskResultStatus.FAILED,
}


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

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        record = TaskRecord(
            id=new_result_id(),
            task_path=task.module_path,
            queue=task.queue_name,
            backend=self.alias,
            args=normalize_json(list(args)),
            kwargs=normalize_json(dict(kwargs)),
            takes_context=task.takes_context,
            queue_priority=task.priority,
            queue_run_at=task.run_after or timezone.now(),
        )
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


def _task_of(record: TaskRecord) -> Task:
    task = import_string(record.task_path)
    if not isinstance(task, Task):
        raise TypeError(f"{record.task_path} is not a django.tasks Task")
    return task.using(
        priority=record.queue_priority,
        queue_name=record.queue,
        run_after=record.queue_run_at,
        backend=record.backend,
    )


def to_task_result(record: TaskRecord, task: Task | None = None) -> TaskResult:
    result = TaskResult(
        task=task or _task_of(record),
        id=record.pk,
        status=STATUS[QueueState(record.queue_state)],
        enqueued_at=record.queue_enqueued_at,
        started_at=record.started_at,
        finished_at=record.queue_finished_at,
        last_attempted_at=record.queue_last_attempt_at,
        args=record.args,
        kwargs=record.kwargs,
        backend=record.backend,
        errors=[TaskError(**error) for error in record.errors],
        worker_ids=list(record.worker_ids),
    )
    object.__setattr__(result, "_return_value", record.return_value)
    return result


def run_record(record: TaskRecord) -> None:
    """The handler of a TaskRecord: call its task and keep the return value (runs inside the
    transaction that records the outcome)."""
    claim = record._queue_claim
    record.worker_ids = [*record.worker_ids, claim.worker_id]
    record.started_at = record.started_at or claim.claimed_at
    task = _task_of(record)
    result = to_task_result(record, task)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(DatabaseBackend, task_result=result)
    if record.takes_context:
        value = task.call(TaskContext(task_result=result), *record.args, **record.kwargs)
    else:
        value = task.call(*record.args, **record.kwargs)
    record.return_value = normalize_json(value)
    record.save(update_fields=["return_value", "worker_ids", "started_at"])


TaskRecord.runner = run_record


@receiver(job_succeeded, sender=TaskRecord, dispatch_uid="django_dbqueue.tasks.finished_ok")
def _finished_ok(sender: Any, row: TaskRecord, **kwargs: Any) -> None:
    task_finished.send(DatabaseBackend, task_result=to_task_result(row))


@receiver(job_failed, sender=TaskRecord, dispatch_uid="django_dbqueue.tasks.finished_failed")
def _finished_failed(sender: Any, row: TaskRecord, retry_at: Any, **kwargs: Any) -> None:
    if retry_at is None:  # a retry is not the end of the task
        task_finished.send(DatabaseBackend, task_result=to_task_result(row))
