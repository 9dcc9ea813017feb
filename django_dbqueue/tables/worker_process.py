"""``WorkerProcess``: which workers are alive, for operators (the admin dashboard, scripts).

Each worker process registers itself when it starts, refreshes ``last_seen_at`` every
``DBQUEUE_HEARTBEAT_INTERVAL`` seconds, and removes itself on a clean exit; a killed
worker's row goes stale. Correctness never depends on this table: leases decide when a row
may be taken again.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models

from ..backends import db_now_plus
from ..conf import settings


class WorkerProcessQuerySet(models.QuerySet):
    def alive(self) -> models.QuerySet:
        """Workers seen within three heartbeats (database clock)."""
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
        app_label = "django_dbqueue"
        verbose_name = "worker process"
        verbose_name_plural = "worker processes"

    def __str__(self) -> str:
        return self.worker_id
