"""Default receivers: log what the queue does (lazily formatted), and wake idle workers
when a READY row is saved where the database can notify them (PostgreSQL)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import connections
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.dispatch import receiver

from .backends import backend_for
from .models import queue_models
from .observability import metrics, traces
from .signals import job_claimed, job_failed
from .states import QueueState
from .workflows import purge as workflow_purge

logger = logging.getLogger("django_dbqueue")


@receiver(job_claimed, dispatch_uid="django_dbqueue.log_claimed")
def log_claimed(sender: Any, rows: list[Any], worker_id: str, **kwargs: Any) -> None:
    logger.debug("%s claimed %d %s row(s)", worker_id, len(rows), sender._meta.label)


@receiver(job_failed, dispatch_uid="django_dbqueue.log_failed")
def log_failed(sender: Any, row: Any, error: Any, retry_at: Any, **kwargs: Any) -> None:
    if isinstance(error, BaseException):
        summary = [f"{type(error).__name__}: {error}".strip()]
    else:
        summary = str(error).strip().splitlines()[-1:] or ["(no message)"]
    if retry_at is None:
        logger.error(
            "%s pk=%s FAILED for good after %s attempt(s): %s",
            sender._meta.label,
            row.pk,
            row.queue_attempts,
            summary[0],
        )
    else:
        logger.warning(
            "%s pk=%s attempt %s failed, retry at %s: %s",
            sender._meta.label,
            row.pk,
            row.queue_attempts,
            retry_at.isoformat(),
            summary[0],
        )


def on_queue_row_saved(sender: Any, instance: Any, created: bool, using: str, **kwargs: Any) -> None:
    if created and instance.queue_state == QueueState.READY:
        backend_for(using).notify([sender._meta.db_table])


def connect_wakeups() -> None:
    """Connect ``on_queue_row_saved`` for every queue model, where some database can wake
    workers: elsewhere a receiver would cost every ``save()`` for nothing."""
    if not any(backend_for(alias).can_notify for alias in connections):
        return
    for model in queue_models():
        post_save.connect(
            on_queue_row_saved, sender=model, dispatch_uid=f"dbqueue-notify-{model._meta.label}"
        )


def connect_observability() -> None:
    """Count the queue's signals for Prometheus, and give new rows of models that keep a trace
    context the context of their enqueue span: each only where its library is installed."""
    metrics.connect()
    # A queue row saved inside ``with batches.batch():`` joins that batch (docs/composition.md):
    # its receiver is connected when the first batch opens (composition.hooks.open_batch).
    if not traces.installed():
        return
    for model in queue_models():
        if traces.traced(model):
            pre_save.connect(
                traces.on_pre_save, sender=model, dispatch_uid=f"dbqueue-trace-{model._meta.label}"
            )


def connect_workflow_cleanup() -> None:
    """Delete a workflow row's checkpoints, events and progress with the row, for every model
    whose handler is a ``@workflow`` (workflows/purge.py). Only those: with a delete receiver,
    Django reads the rows a ``queryset.delete()`` deletes and signals each instead of sending
    one DELETE, so ``Message`` and ``TaskRecord``, which ``purgequeue`` deletes in bulk (and
    cleans up in its batches), keep their fast delete."""
    receivers = workflow_purge.receivers
    for model in queue_models():
        if getattr(getattr(model, "process", None), "workflow", False):
            uid = f"dbqueue-workflow-cleanup-{model._meta.label}"
            pre_delete.connect(receivers.before, sender=model, dispatch_uid=uid)
            post_delete.connect(receivers.after, sender=model, dispatch_uid=uid)
