"""Instant pickup on PostgreSQL: enqueues ``NOTIFY``, idle workers ``LISTEN``.

MySQL/MariaDB and SQLite have no such channel, so workers there poll with a cheap,
lock-free, index-only probe (``QueueQuerySet.has_ready``), backing off while idle. On
PostgreSQL a notification wakes an idle worker at once; polling stays on as the safety net
(a lost notification, rows made by ``bulk_create`` or raw SQL, rows scheduled for later).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from functools import partial
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.models.signals import post_save

logger = logging.getLogger("django_dbqueue.wakeup")

CHANNEL = "django_dbqueue"


def notify(using: str, tables: Iterable[str]) -> None:
    """After the current transaction commits (at once outside one), tell listening workers
    that ``tables`` have rows to do. A no-op except on PostgreSQL."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    wanted = set(tables)
    if not connection.in_atomic_block:
        for table in sorted(wanted):
            _send(using, table)
        return
    # One NOTIFY per table per transaction. Django drops run_on_commit on a rollback, so a
    # table queued there is pending exactly while this transaction may still commit.
    queued = {getattr(entry[1], "dbqueue_table", None) for entry in connection.run_on_commit}
    for table in sorted(wanted - queued):
        send = partial(_send, using, table)
        send.dbqueue_table = table  # type: ignore[attr-defined]
        transaction.on_commit(send, using=using)


def _send(using: str, table: str) -> None:
    try:
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, table])
    except DatabaseError as exc:  # a wake-up is an optimisation: polling still finds the rows
        logger.debug("NOTIFY failed: %s", exc)


def on_queue_row_saved(sender: Any, instance: Any, created: bool, using: str, **kwargs: Any) -> None:
    from .states import QueueState

    if created and instance.queue_state == QueueState.READY:
        notify(using, [sender._meta.db_table])


def connect_signals() -> None:
    from .models import QueueMixin, queue_models

    if not any(connections[alias].vendor == "postgresql" for alias in connections):
        # Only PostgreSQL is notified: elsewhere a receiver would cost every save() for nothing.
        return
    for model in queue_models():
        if issubclass(model, QueueMixin):
            uid = f"dbqueue-notify-{model._meta.label}"
            post_save.connect(on_queue_row_saved, sender=model, dispatch_uid=uid)


class Listener:
    """A daemon thread holding ``LISTEN`` on its own connection; ``event`` is set whenever a
    notification names one of ``tables``."""

    def __init__(self, using: str, tables: Iterable[str], event: threading.Event) -> None:
        self.using = using
        self.tables = set(tables)
        self.event = event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dbqueue-listener", daemon=True)
        self.listening = threading.Event()

    @staticmethod
    def supported(using: str) -> bool:
        return connections[using].vendor == "postgresql"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        # A connection of its own, outside Django's handler: it stays in autocommit and idle.
        while not self._stop.is_set():
            wrapper = connections.create_connection(self.using)
            try:
                wrapper.ensure_connection()
                raw = wrapper.connection
                raw.autocommit = True
                raw.execute(f"LISTEN {CHANNEL}")
                self.listening.set()
                while not self._stop.is_set():
                    for note in raw.notifies(timeout=0.5):
                        if note.payload in self.tables:
                            self.event.set()
            except Exception as exc:  # noqa: BLE001 - reconnect, polling covers the gap
                self.listening.clear()
                logger.info("LISTEN connection lost (%s); reconnecting", exc)
                self._stop.wait(1.0)
            finally:
                try:
                    wrapper.close()
                except DatabaseError:
                    pass
