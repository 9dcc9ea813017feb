"""The firing tick of a worker: a daemon thread that fires due schedules about once a second.

A thread with its own database connection (Django's are per thread), like the lease
keeper, so a slot fires on time while the worker runs a long job, and the claim path never
waits for it. The first worker process of each ``runqueue`` ticks (one more session per
host, not per process; a ``Worker`` run on its own ticks too); the ledger's unique key makes
each slot fire once however many hosts tick (``schedules/firing.py``). The first tick syncs
the code's declarations to the table. ``runqueue --burst`` ticks once, before it drains;
``--no-schedules`` never.

The same thread keeps the partitions of a partitioned history made ahead (when
``DBQUEUE_HISTORY_PARTITIONS`` is set): at its first tick and then hourly; every host may do it,
since a partition already made is simply not made again.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connections

from ..conf import settings

logger = logging.getLogger("django_dbqueue.schedules")

#: Longest pause after failed ticks (a database outage, a missing table), in seconds.
LONGEST_PAUSE = 30.0
#: Seconds between two looks at whether any schedule is enabled (for what an outage logs).
LOOK_INTERVAL = 60.0
#: Seconds between two upkeeps of the history's partitions (after a failure too).
PARTITION_UPKEEP_INTERVAL = 3600.0


class Ticker:
    def __init__(self, worker_id: str, database: str | None, enabled: bool = True) -> None:
        self.worker_id = worker_id
        self.database = database
        self.enabled = enabled
        self.synced = False
        self.failures = 0
        self.next_upkeep = 0.0
        #: Whether the database holds an enabled schedule (looked up once a LOOK_INTERVAL):
        #: only then is an outage the ticker's to report.
        self.scheduled = True
        self.next_look = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dbqueue-schedules-{worker_id}", daemon=True)

    def start(self, burst: bool = False) -> None:
        if not self.enabled:
            return
        if burst:
            self.tick()
        else:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def tick(self) -> int:
        """Sync (the first time), then fire what is due; errors are logged, never raised."""
        # Here, not at import: the worker also runs without django_dbqueue's own tables.
        from ..schedules.firing import database, fire_due, schedules_exist
        from ..schedules.syncing import sync

        using = self.database or database()
        try:
            if not self.synced:
                sync(using)
                self.synced = True
            if time.monotonic() >= self.next_look:
                self.scheduled = schedules_exist(using)
                self.next_look = time.monotonic() + LOOK_INTERVAL
            fired = fire_due(using, self.worker_id)
        except DatabaseError as exc:
            self.failures += 1
            self.log_failure(exc)
            try:
                connections[using].close()  # a broken connection is not reused
            except DatabaseError:
                pass  # closing a connection the server dropped can raise; Django let go of it
            return 0
        except Exception:  # a tick must never stop the worker
            self.failures += 1
            if self.failures in (1, 10) or self.failures % 100 == 0:  # a bug: its traceback
                logger.exception("schedules: tick failed (%d in a row)", self.failures)
            return 0
        self.failures = 0
        self.upkeep()
        return fired

    def log_failure(self, exc: DatabaseError) -> None:
        """One line per outage, as the worker logs (not a traceback: an outage is no bug), at
        WARNING for the 1st failure in a row, the 10th and every 100th, at DEBUG otherwise.
        Always at DEBUG when no schedule is enabled: then the ticker has nothing to fire, and
        the worker's own line says the rest."""
        reported = self.failures in (1, 10) or self.failures % 100 == 0
        log = logger.warning if reported and self.scheduled else logger.debug
        log(
            "schedules: database error (%s); next tick in %.1fs (%d failed in a row)",
            " ".join(str(exc).split()),  # PostgreSQL's messages span lines
            self.pause(),
            self.failures,
        )

    def pause(self) -> float:
        """Seconds to the next tick: the interval, doubled per failure in a row, bounded."""
        pause = settings.SCHEDULE_INTERVAL * 2 ** min(self.failures, 10)
        return min(pause, max(LONGEST_PAUSE, settings.SCHEDULE_INTERVAL))

    def upkeep(self) -> None:
        """Make the history's partitions due ahead, hourly; a failure is logged, never raised."""
        if settings.HISTORY_PARTITIONS is None or time.monotonic() < self.next_upkeep:
            return
        self.next_upkeep = time.monotonic() + PARTITION_UPKEEP_INTERVAL
        from ..queue.partitions import make_ahead

        try:
            made = make_ahead(self.database)
        except Exception as exc:  # noqa: BLE001 - upkeep must never stop the worker
            logger.warning("history partitions: upkeep failed (next try in an hour): %s", exc)
            return
        if made:
            logger.info("history partitions: made %s", ", ".join(made))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.tick()
                self._stop.wait(self.pause())
        finally:
            connections.close_all()  # this thread's connections
