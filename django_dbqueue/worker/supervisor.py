"""``Supervisor``: runs N worker processes and keeps them alive (``runqueue --concurrency N``).

Each worker is a forked child in the supervisor's process group, so killing the group
(``kill -9 -PGID``, a container runtime, systemd) stops every worker at once. The children
ignore SIGINT: a terminal's Ctrl-C reaches the whole group, and only the supervisor acts on
it, forwarding one SIGTERM (graceful) and, on a second signal, SIGKILL.
A child that dies unexpectedly is replaced; a child whose handler ignored its timeout
reports the row over a pipe and exits, and the supervisor records that attempt as failed
("timed out") once the child's database session (and its locks) are gone.
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
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, InterfaceError, OperationalError, connections

from .. import claims
from ..exceptions import JobTimeout, LeaseLost
from ..models import QueueMixin
from .loop import Worker, WorkerStats
from .progress import Progress
from .tables import check_tables

logger = logging.getLogger("django_dbqueue.supervisor")

#: Exit code of a child whose handler would not stop at its timeout.
EXIT_HARD_TIMEOUT = 75
#: Seconds a child must have lived for its death not to count as part of a crash loop.
STABLE_AFTER = 60.0
#: Exit code of a child that found the setup unusable (a queue table is missing): replacing
#: it would only crash again, so the supervisor stops with the child's message.
EXIT_CONFIG = 78


@dataclass
class _Child:
    index: int
    pid: int
    reader: int
    buffer: bytes = b""
    stats: dict[str, int] = field(default_factory=dict)
    timeouts: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


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
        self.children: dict[int, _Child] = {}
        self.totals = WorkerStats()
        self.stopping = False
        self.failures = 0
        #: Worker slots waiting to be replaced: index -> monotonic time due.
        self.restarts: dict[int, float] = {}
        self.fatal: str | None = None

    # -- children --------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        reader, writer = os.pipe()
        connections.close_all()  # a forked child must not share the parent's sockets
        pid = os.fork()
        if pid == 0:  # the child
            os.close(reader)
            # Ctrl-C is the supervisor's to handle (it reaches the whole process group).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            code = 1
            try:
                code = self._child_main(index, writer)
            except ImproperlyConfigured as exc:
                logger.error("worker process %d stopped: %s", index, exc)
                _send(writer, {"fatal": str(exc)})
                code = EXIT_CONFIG
            except BaseException:
                logger.exception("worker process %d crashed", index)
            finally:
                os._exit(code)
        os.close(writer)
        self.children[pid] = _Child(index=index, pid=pid, reader=reader)

    def _child_main(self, index: int, writer: int) -> int:
        parent = os.getppid()

        def send(message: dict[str, Any]) -> None:
            _send(writer, message)

        def hard_timeout(model: type[QueueMixin], pk: Any, token: int, seconds: float) -> None:
            send({"hard_timeout": {"model": model._meta.label, "pk": pk, "token": token, "seconds": seconds}})
            os._exit(EXIT_HARD_TIMEOUT)

        worker = Worker(
            **{**self.options, "schedules": self.options.get("schedules", True) and index == 0},  # 1 per host
            worker_id=f"{self.base_id}-{index}",
            on_hard_timeout=hard_timeout,
            stop_signals=(signal.SIGTERM,),  # Ctrl-C is the supervisor's (see the module's docstring)
            parent_pid=parent,
        )
        stats = worker.run()
        send({"stats": stats.as_dict()})
        return 0 if worker.fatal is None else 1

    # -- the supervisor loop ---------------------------------------------------------------

    def run(self) -> WorkerStats:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        bar = None
        try:
            if not self._wait_for_database():
                return self.totals
            bar = self._progress_bar()
            for index in range(self.concurrency):
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
                _kill(pid, signal.SIGKILL)
            os._exit(128 + signum)
        self.stopping = True
        logger.info(
            "%s received: workers finish their current job (signal again to exit now)",
            signal.Signals(signum).name,
        )
        for pid in self.children:
            _kill(pid, signal.SIGTERM)

    def _read_pipes(self, timeout: float) -> None:
        readers = {child.reader: child for child in self.children.values()}
        try:
            ready, _, _ = select.select(list(readers), [], [], timeout)
        except InterruptedError:
            return
        for fd in ready:
            self._drain(readers[fd])

    def _drain(self, child: _Child) -> None:
        try:
            chunk = os.read(child.reader, 65536)
        except OSError:
            return
        child.buffer += chunk
        *lines, child.buffer = child.buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "stats" in message:
                child.stats = message["stats"]
            if "hard_timeout" in message:
                child.timeouts.append(message["hard_timeout"])
            if "fatal" in message:
                self.fatal = message["fatal"]

    def _reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            child = self.children.pop(pid)
            while True:  # whatever the child wrote before it exited
                before = len(child.buffer)
                self._drain(child)
                if len(child.buffer) == before:
                    break
            os.close(child.reader)
            for name, value in child.stats.items():
                setattr(self.totals, name, getattr(self.totals, name) + value)
            for report in child.timeouts:
                self._record_hard_timeout(report)
            code = os.waitstatus_to_exitcode(status)
            if code == EXIT_CONFIG and self.fatal and not self.stopping:
                logger.error("stopping all worker processes: %s", self.fatal)
                self.stopping = True
                for pid in self.children:
                    _kill(pid, signal.SIGTERM)
            if code == 0 or self.stopping:
                continue
            # Back off while children keep dying young; one that ran a while was not a
            # crash loop, so the count starts over.
            if time.monotonic() - child.started >= STABLE_AFTER:
                self.failures = 0
            self.failures += 1
            pause = min(0.5 * 2 ** min(self.failures, 5), 15.0)
            logger.warning(
                "worker process %d exited with %s; replacing it in %.1fs", child.index, code, pause
            )
            # Scheduled, not slept: the other children's pipes and exits are served meanwhile.
            self.restarts[child.index] = time.monotonic() + pause

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


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _send(writer: int, message: dict[str, Any]) -> None:
    """Report to the supervisor; if it is gone (killed), there is nobody to tell."""
    try:
        os.write(writer, (json.dumps(message) + "\n").encode())
    except OSError:  # BrokenPipeError: the supervisor died first
        pass
