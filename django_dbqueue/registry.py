"""``WorkerProcess``: which workers are alive, for operators (the admin dashboard, scripts).

Each worker process registers itself when it starts, its keeper thread refreshes
``last_seen_at`` every ``DBQUEUE_HEARTBEAT_INTERVAL`` seconds, and it removes itself on a
clean exit. A killed worker's row simply goes stale. Correctness never depends on this
table: leases decide when a row may be taken again.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import DatabaseError, models

from .conf import settings

if TYPE_CHECKING:
    from .models import QueueMixin


class WorkerProcessQuerySet(models.QuerySet):
    def alive(self) -> models.QuerySet:
        """Workers seen within three heartbeats (database clock)."""
        from .query import db_now_plus

        window = timedelta(seconds=3 * settings.HEARTBEAT_INTERVAL)
        return self.filter(last_seen_at__gte=db_now_plus(-window))


class WorkerProcess(models.Model):
    worker_id = models.CharField(max_length=255, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queue_models = models.TextField(help_text="Queue models it consumes, comma-separated.")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(db_index=True)

    objects = WorkerProcessQuerySet.as_manager()

    class Meta:
        verbose_name = "worker process"

    def __str__(self) -> str:
        return self.worker_id


def register(worker_id: str, queue_models: Sequence[type[QueueMixin]], using: str) -> None:
    from .query import DbNow

    WorkerProcess.objects.using(using).update_or_create(
        worker_id=worker_id,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "queue_models": ",".join(m._meta.label for m in queue_models),
            "started_at": DbNow(),
            "last_seen_at": DbNow(),
        },
    )


def heartbeat(worker_id: str, using: str) -> None:
    from .query import DbNow

    WorkerProcess.objects.using(using).filter(worker_id=worker_id).update(last_seen_at=DbNow())


def unregister(worker_id: str, using: str) -> None:
    try:
        WorkerProcess.objects.using(using).filter(worker_id=worker_id).delete()
    except DatabaseError:
        pass  # the database is gone; the row goes stale instead
