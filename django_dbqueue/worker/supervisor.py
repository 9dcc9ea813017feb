"""``Supervisor``: runs N worker processes and keeps them alive (``runqueue --concurrency N``).

How a stop reaches the workers, and what a handler forks: see ``children``.

A child that dies unexpectedly is replaced; the rows of the claims it still held are put back
at once, their reason naming how it died ("worker process killed by SIGSEGV while running this
job"), instead of waiting for their lease. A child whose handler ignored its timeout reports the
row over the status pipe and exits, and the supervisor records that attempt as failed ("timed
out") once the child's group (and its database sessions and locks) are gone.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, TextIO

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connections, router

from ..exceptions import JobTimeout, LeaseLost
from ..models import QueueMixin
from ..queue import claims, rescue
from . import children, startup
from .children import EXIT_CONFIG, EXIT_HARD_TIMEOUT, Child
from .loop import WorkerStats
from .progress import Progress
from .tables import check_tables

logger = logging.getLogger("django_dbqueue.supervisor")

#: Seconds a child must have lived for its death not to count as part of a crash loop.
STABLE_AFTER = 60.0


class Supervisor:
    def __init__(
        self,
        *,
        concurrency: int,
        worker_options: dict[str, Any],
        progress: bool = False,
        stdout: TextIO | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.options = worker_options
        self.progress = progress
        self.stdout = stdout or sys.stdout
        self.base_id = worker_options.pop("worker_id", None) or f"{os.uname().nodename}:{os.getpid()}"
        self.children: dict[int, Child] = {}
        self.totals = WorkerStats()
        self.stopping = False
        self.failures = 0
        #: Worker slots waiting to be replaced: index -> monotonic time due.
        self.restarts: dict[int, float] = {}
        self.fatal: str | None = None

    # -- children --------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        connections.close_all()  # a forked child must not share the parent's sockets
        child = children.fork_worker(index, self.options, self.base_id, list(self.children.values()))
        self.children[child.pid] = child
        if self.stopping:
            # The stop came while this worker was being forked, before it was in
            # self.children: it gets the same one stop the others got.
            self._stop(child)

    # -- the supervisor loop ---------------------------------------------------------------

    def run(self) -> WorkerStats:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if startup.stop_requested():  # a signal while Django started: stop before starting
            self.stopping = True
            logger.info("stop signal received while starting: no worker started")
        bar = None
        try:
            if not self._wait_for_database():
                return self.totals
            bar = self._progress_bar()
            for index in range(self.concurrency):
                if self.stopping:  # a signal while the database was awaited or a worker forked
                    break
                self._spawn(index)
            while self.children or self.restarts:
                self._read_pipes(timeout=0.2)
                self._reap()
                self._restart_due()
                if bar is not None:
                    bar.refresh_from_db()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if bar is not None:
                bar.close()
        if self.fatal:
            raise ImproperlyConfigured(self.fatal)
        return self.totals

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            logger.warning("second signal: killing %d worker process(es)", len(self.children))
            for pid in self.children:
                children.killpg(pid, signal.SIGKILL)
                children.kill(pid, signal.SIGKILL)  # in case it had not made its group yet
            os._exit(128 + signum)
        logger.info(
            "%s received: workers finish their current job (signal again to exit now)",
            signal.Signals(signum).name,
        )
        self._stop_children()

    def _stop_children(self) -> None:
        """One graceful stop for every worker: a byte on its stop pipe, not a signal (see
        ``children``), so a worker that also got the signal itself still stops once."""
        self.stopping = True
        for child in list(self.children.values()):
            self._stop(child)

    @staticmethod
    def _stop(child: Child) -> None:
        try:
            os.write(child.stopper, b"s")
        except OSError:  # it has exited already
            pass

    def _read_pipes(self, timeout: float) -> None:
        readers = {child.reader: child for child in self.children.values()}
        try:
            ready, _, _ = select.select(list(readers), [], [], timeout)
        except InterruptedError:
            return
        for fd in ready:
            self._drain(readers[fd])

    def _drain(self, child: Child) -> bool:
        """Read what the child wrote; False when there is nothing (more) to read now.

        The read end does not block: a process a handler forked may still hold the write end
        after the worker exited, and the supervisor must never wait for it."""
        try:
            chunk = os.read(child.reader, 65536)
        except OSError:  # BlockingIOError: nothing there now
            return False
        if not chunk:
            return False
        child.buffer += chunk
        *lines, child.buffer = child.buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "stats" in message:
                child.stats = message["stats"]
            if "held" in message:
                child.held[message["held"]["token"]] = message["held"]["model"]
            if "dropped" in message:
                child.held.pop(message["dropped"]["token"], None)
            if "hard_timeout" in message:
                child.timeouts.append(message["hard_timeout"])
            if "fatal" in message:
                self.fatal = message["fatal"]
        return True

    def _reap(self) -> None:
        for pid in list(self.children):
            status = children.reap_with_group(pid)
            if status is None:
                continue
            child = self.children.pop(pid)
            while self._drain(child):  # whatever the child wrote before it exited
                pass
            os.close(child.reader)
            os.close(child.stopper)
            for name, value in child.stats.items():
                setattr(self.totals, name, getattr(self.totals, name) + value)
            for report in child.timeouts:
                self._record_hard_timeout(report)
                child.held.pop(report["token"], None)
            code = os.waitstatus_to_exitcode(status)
            if child.held:
                self._give_back(child, code)
            if code == EXIT_CONFIG and self.fatal and not self.stopping:
                logger.error("stopping all worker processes: %s", self.fatal)
                self._stop_children()
            if code == 0 or self.stopping:
                continue
            # Back off while children keep dying young; one that ran a while was not a
            # crash loop, so the count starts over.
            if time.monotonic() - child.started >= STABLE_AFTER:
                self.failures = 0
            self.failures += 1
            pause = min(0.5 * 2 ** min(self.failures, 5), 15.0)
            logger.warning(
                "worker process %d %s; replacing it in %.1fs", child.index, children.how_it_ended(code), pause
            )
            # Scheduled, not slept: the other children's pipes and exits are served meanwhile.
            self.restarts[child.index] = time.monotonic() + pause

    def _give_back(self, child: Child, code: int) -> None:
        """The child died holding claims: put their rows back now, with how it died as the
        reason, rather than after their lease with "lease expired". Its group is gone, so are
        its sessions; a row still locked by one (the server has not noticed yet) is skipped
        and its lease brings it back."""
        cause = f"worker process {children.how_it_ended(code)}"
        if code == EXIT_HARD_TIMEOUT:
            cause = "worker process replaced after a handler ignored its timeout"
        using = self.options.get("database")
        for token, label in child.held.items():
            try:
                model = apps.get_model(label)
                rescue.rescue_claim(
                    model, using or router.db_for_write(model) or DEFAULT_DB_ALIAS, token, cause
                )
            except (DatabaseError, LookupError) as exc:
                logger.warning("could not give back the rows of worker process %d: %s", child.index, exc)
            finally:
                connections.close_all()

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, due in list(self.restarts.items()):
            if self.stopping:
                self.restarts.clear()
                return
            if now >= due:
                del self.restarts[index]
                self._spawn(index)

    def _wait_for_database(self) -> bool:
        """Check the tables before starting workers; while the database does not answer,
        wait for it (a deploy may start workers before the database is up)."""
        pause = 0.5
        while not self.stopping:
            try:
                check_tables(self.options.get("models") or [], self.options.get("database"))
                return True
            except (OperationalError, InterfaceError) as exc:
                logger.warning("waiting for the database (%s); retrying in %.0fs", exc, pause)
                connections.close_all()
                time.sleep(pause)
                pause = min(pause * 2, 15.0)
        return False

    def _record_hard_timeout(self, report: dict[str, Any]) -> None:
        """The child is gone, so are its locks: record the attempt as timed out (fenced)."""
        try:
            model = apps.get_model(report["model"])
            using = self.options.get("database") or "default"
            row = claims.adopt(model, using, report["pk"], report["token"], "supervisor")
            if row is None:
                return
            row.mark_failed(
                JobTimeout(
                    f"timed out after {report['seconds']:g} s "
                    "(the handler ignored it; worker process replaced)"
                )
            )
            self.totals.failed += 1
        except (DatabaseError, LeaseLost, LookupError) as exc:
            logger.warning(
                "could not record the timeout of %s: %s (its lease will bring it back)", report, exc
            )
        finally:
            connections.close_all()

    # -- progress --------------------------------------------------------------------------

    def _progress_bar(self) -> Progress | None:
        if not self.progress:
            return None
        models: Sequence[type[QueueMixin]] = self.options.get("models") or []
        return Progress(models, self.options.get("database"), self.stdout)
