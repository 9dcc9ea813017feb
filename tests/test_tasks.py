"""Conformance of the django.tasks backend, written from Django's documentation and the
behaviour of its ImmediateBackend, run against the real database."""

from __future__ import annotations

from datetime import timedelta

import django
import pytest

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0"),
]

if django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils import timezone

    from django_dbqueue.models import TaskRecord
    from django_dbqueue.worker import Worker
    from tests.testapp import tasks


def run_worker():
    return Worker(models=[TaskRecord], burst=True, handle_signals=False).run()


def test_backend_is_configured_with_its_capabilities() -> None:
    backend = task_backends["default"]
    assert type(backend).__module__ == "django_dbqueue.tasks"
    assert backend.supports_defer and backend.supports_get_result and backend.supports_priority
    assert backend.supports_async_task


def test_enqueue_then_get_result_round_trip() -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and result.id
    assert result.args == [2, 3] and result.kwargs == {} and result.backend == "default"
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.attempts == 1 and len(result.worker_ids) == 1
    again = tasks.add.get_result(result.id)
    assert again.return_value == 5 and again.status == TaskResultStatus.SUCCESSFUL


def test_get_result_of_unknown_ids_and_of_another_task() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("nope")
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        tasks.shout.get_result(result.id)


def test_aget_result() -> None:
    from asgiref.sync import async_to_sync

    result = tasks.add.enqueue(4, 4)
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY


def test_defer_runs_only_when_due() -> None:
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    now = tasks.add.enqueue(3, 4)
    run_worker()
    assert tasks.add.get_result(now.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY


def test_priority_order_higher_first() -> None:
    order = []

    def started(sender, task_result, **kwargs):
        order.append(task_result.args[0])

    task_started.connect(started)
    try:
        for priority in (1, 50, -10, 20):
            tasks.add.using(priority=priority).enqueue(priority, 0)
        run_worker()
    finally:
        task_started.disconnect(started)
    assert order == [50, 20, 1, -10]


def test_failed_task_keeps_the_exception_class_and_traceback(settings) -> None:
    from django_dbqueue.retry import NoRetry

    settings.DBQUEUE_TASK_RETRY = NoRetry()
    result = tasks.explode.enqueue("kaboom")
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError" and error.exception_class is ValueError
    assert "Traceback" in error.traceback and "ValueError: kaboom" in error.traceback


def test_failures_are_retried_by_the_policy_with_every_error_kept(settings) -> None:
    from django_dbqueue.retry import Fixed

    settings.DBQUEUE_TASK_RETRY = Fixed(delay_seconds=0.01, max_attempts=2)
    result = tasks.explode.enqueue("again")
    run_worker()
    import time

    time.sleep(0.05)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2 and result.attempts == 2


def test_takes_context_sees_the_attempt() -> None:
    result = tasks.which_attempt.enqueue()
    run_worker()
    assert tasks.which_attempt.get_result(result.id).return_value == 1


def test_async_tasks_run() -> None:
    result = tasks.async_double.enqueue(21)
    run_worker()
    assert tasks.async_double.get_result(result.id).return_value == 42


def test_queues_are_validated_and_consumable_separately() -> None:
    with pytest.raises(InvalidTask):
        tasks.add.using(queue_name="unknown").enqueue(1, 2)
    other = tasks.shout.enqueue("hi")
    default = tasks.add.enqueue(1, 2)
    Worker(models=[TaskRecord], burst=True, handle_signals=False, queues=["other"]).run()
    assert tasks.shout.get_result(other.id).return_value == "HI"
    assert tasks.add.get_result(default.id).status == TaskResultStatus.READY


def test_signals_fire() -> None:
    seen = []

    def make(name):
        def receiver(sender, task_result, **kwargs):
            seen.append((name, task_result.status))

        return receiver

    receivers = {
        task_enqueued: make("enqueued"),
        task_started: make("started"),
        task_finished: make("finished"),
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        run_worker()
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert seen == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]
