"""Instant pickup where the database can wake workers (PostgreSQL's LISTEN/NOTIFY).

Elsewhere idle workers poll with a cheap, lock-free, index-only probe (``has_ready``),
backing off while idle; with a listener, polling stays on as the safety net (a lost
notification, rows made by raw SQL, rows scheduled for later).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from ..backends import backend_for

logger = logging.getLogger("django_dbqueue.worker")


class Listener:
    """A daemon thread listening on its own connection; ``wake`` is set whenever a
    notification names one of ``tables``."""

    def __init__(self, using: str, tables: Iterable[str], wake: threading.Event) -> None:
        self.backend = backend_for(using)
        self.tables = set(tables)
        self.wake = wake
        self.listening = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dbqueue-listener", daemon=True)

    @staticmethod
    def supported(using: str) -> bool:
        return backend_for(using).can_notify

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.listening.set()
                self.backend.listen(self.tables, self.wake, self._stop)
            except Exception as exc:  # noqa: BLE001 - reconnect; polling covers the gap
                logger.info("LISTEN connection lost (%s); reconnecting", exc)
            finally:
                self.listening.clear()
            self._stop.wait(1.0)
