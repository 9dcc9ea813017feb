"""``TaskRecord``: one row per ``django.tasks`` task enqueued through ``django_dbqueue.tasks``.

The model imports nothing from ``django.tasks`` (Django >= 6.0) so that the app still loads on
Django 5.2; running a record needs Django 6.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

from django.db import models
from django.utils.crypto import get_random_string

from ..conf import settings
from ..exceptions import Discard
from ..observability.trace_mixin import QueueTraceMixin
from ..queue.mixin import QueueMixin
from ..retry import NoRetry, RetryPolicy
from ..tracebacks import describe_error


def new_result_id() -> str:
    return get_random_string(32)


#: Retry policies of single tasks, by the task's module path (``tasks.retry()`` fills it).
TASK_RETRY_POLICIES: dict[str, RetryPolicy] = {}


def task_retry_policy(task_path: str) -> RetryPolicy:
    """A task's retry policy: its own (``django_dbqueue.tasks.retry``), else
    ``DBQUEUE_TASK_RETRY``, else none: like Django's own backends, a raising task ends
    FAILED unless retries were asked for."""
    return TASK_RETRY_POLICIES.get(task_path) or settings.TASK_RETRY or NoRetry()


class SettingsRetry:
    """The class-level policy of TaskRecord (rescues of rows of unknown tasks); each record
    asks :func:`task_retry_policy` for its own task's."""

    @property
    def max_attempts(self) -> int | None:
        return task_retry_policy("").max_attempts

    def delay(self, attempts: int, error: BaseException | None) -> timedelta | None:
        return task_retry_policy("").delay(attempts, error)


class TaskRecord(QueueTraceMixin, QueueMixin):
    id = models.CharField(primary_key=True, max_length=32, default=new_result_id, editable=False)
    task_path = models.CharField(max_length=255)
    queue = models.CharField(max_length=64, default="default")
    backend = models.CharField(max_length=64, default="default")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    takes_context = models.BooleanField(default=False)
    return_value = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    worker_ids = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    #: The task's own ``run_after`` (None when it runs as soon as possible); the queue's due
    #: time is ``queue_run_at``.
    run_after = models.DateTimeField(null=True, blank=True)

    # The return value, the worker ids and the outcome commit together.
    queue_atomic = True
    # A running task may read its own result (``get_result()``): django.tasks promises it
    # RUNNING until the task returns, so its success is written after it, not first.
    queue_success_first = False
    queue_retry = SettingsRetry()
    # django.tasks' TASK_MIN_PRIORITY..TASK_MAX_PRIORITY (not imported: the model loads on
    # Django 5.2): a record outside it could not become its Task again when it runs.
    queue_priority_range = (-100, 100)

    class Meta(QueueMixin.Meta):
        app_label = "django_dbqueue"
        verbose_name = "task"
        indexes = [
            models.Index(
                fields=["queue_state", "-queue_priority", "queue_run_at", "queue_enqueued_at"],
                name="dbqueue_task_claim",
            ),
            models.Index(
                fields=["queue_state", "queue", "-queue_priority", "queue_run_at", "queue_enqueued_at"],
                name="dbqueue_task_queue_claim",
            ),
            models.Index(fields=["queue_has_error"], name="dbqueue_task_has_error"),  # the admin's filter
            # "Is a task due?" without reading the parked ones (QueueMixin's DUE_INDEX_FIELDS).
            models.Index(fields=["queue_state", "queue_run_at"], name="dbqueue_task_due"),
        ]

    def __str__(self) -> str:
        return f"{self.task_path} [{self.pk}]"

    #: Runs a record's task: set by :mod:`django_dbqueue.tasks.backend` when it is imported (the app
    #: imports it on Django >= 6.0, where ``django.tasks`` exists).
    runner: ClassVar[Callable[[TaskRecord], None] | None] = None

    def process(self) -> None:
        runner = type(self).runner
        if runner is None:
            raise Discard("django.tasks tasks run on Django 6.0 or later")
        runner(self)

    def queue_retry_policy(self) -> RetryPolicy:
        return task_retry_policy(self.task_path)

    def queue_failure_fields(self, error: BaseException | str) -> dict[str, Any]:
        kind = type(error) if isinstance(error, BaseException) else RuntimeError
        entry = {
            "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
            "traceback": describe_error(error),
        }
        return {"errors": [*self.errors, entry], "worker_ids": self.worker_ids, "started_at": self.started_at}
