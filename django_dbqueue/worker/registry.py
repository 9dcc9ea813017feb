"""A worker's row in the ``WorkerProcess`` table: registered at start, refreshed by
heartbeats, removed on a clean exit (operators see who is alive; leases decide correctness)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import DatabaseError

from ..backends import DbNow
from ..tables.worker_process import WorkerProcess

if TYPE_CHECKING:
    from django.db.models import Model


def _table() -> type[WorkerProcess]:
    return WorkerProcess


def register(worker_id: str, queue_models: Sequence[type[Model]], using: str) -> None:
    _table()._default_manager.using(using).update_or_create(
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
    _table()._default_manager.using(using).filter(worker_id=worker_id).update(last_seen_at=DbNow())


def unregister(worker_id: str, using: str) -> None:
    try:
        _table()._default_manager.using(using).filter(worker_id=worker_id).delete()
    except DatabaseError:
        pass  # the database is gone; the row goes stale instead
