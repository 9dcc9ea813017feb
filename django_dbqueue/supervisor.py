"""``Supervisor``: runs N worker processes and keeps them alive (``runqueue --concurrency N``).

Each worker is a forked child in its own process group, so a terminal's Ctrl-C reaches only
the supervisor, which forwards one SIGTERM (graceful) and, on a second signal, SIGKILLs.
A child that dies unexpectedly is replaced; a child whose handler ignored its timeout
reports the row over a pipe and exits, and the supervisor records that attempt as failed
("timed out") once the child's database session (and its locks) are gone.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from django.apps import apps
from django.db import DatabaseError, connections

from .exceptions import JobTimeout, LeaseLost
from .models import QueueMixin
from .states import QueueState
from .worker import Worker, WorkerStats, check_tables

logger = logging.getLogger("django_dbqueue.supervisor")

#: Exit code of a child whose handler would not stop at its timeout.
EXIT_HARD_TIMEOUT = 75


@dataclass
class _Child:
    index: int
    pid: int
    reader: int
    buffer: bytes = b""
    stats: dict[str, int] = field(default_factory=dict)
    timeouts: list[dict[str, Any]] = field(default_factory=list)


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

    # -- children --------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        reader, writer = os.pipe()
        connections.close_all()  # a forked child must not share the parent's sockets
        pid = os.fork()
        if pid == 0:  # the child
            os.close(reader)
            os.setpgid(0, 0)
            code = 1
            try:
                code = self._child_main(index, writer)
            except BaseException:
                logger.exception("worker process %d crashed", index)
            finally:
                os._exit(code)
        os.close(writer)
        self.children[pid] = _Child(index=index, pid=pid, reader=reader)

    def _child_main(self, index: int, writer: int) -> int:
        parent = os.getppid()

        def send(message: dict[str, Any]) -> None:
            os.write(writer, (json.dumps(message) + "\n").encode())

        def hard_timeout(model: type[QueueMixin], pk: Any, token: int, seconds: float) -> None:
            send({"hard_timeout": {"model": model._meta.label, "pk": pk, "token": token, "seconds": seconds}})
            os._exit(EXIT_HARD_TIMEOUT)

        worker = Worker(
            **self.options,
            worker_id=f"{self.base_id}-{index}",
            on_hard_timeout=hard_timeout,
            parent_pid=parent,
        )
        stats = worker.run()
        send({"stats": stats.as_dict()})
        return 0 if worker._fatal is None else 1

    # -- the supervisor loop ---------------------------------------------------------------

    def run(self) -> WorkerStats:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        check_tables(self.options.get("models") or [], self.options.get("database"))
        bar = self._progress_bar()
        try:
            for index in range(self.concurrency):
                self._spawn(index)
            while self.children:
                self._read_pipes(timeout=0.2)
                self._reap()
                if bar is not None:
                    bar.refresh_from_db()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if bar is not None:
                bar.close()
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
            if code == 0 or self.stopping:
                continue
            self.failures += 1
            pause = min(0.5 * 2 ** min(self.failures, 5), 15.0)
            logger.warning(
                "worker process %d exited with %s; replacing it in %.1fs", child.index, code, pause
            )
            time.sleep(pause)
            if not self.stopping:
                self._spawn(child.index)

    def _record_hard_timeout(self, report: dict[str, Any]) -> None:
        """The child is gone, so are its locks: record the attempt as timed out (fenced)."""
        try:
            model = apps.get_model(report["model"])
            using = self.options.get("database") or "default"
            row = model.queue_queryset(using).adopt(report["pk"], report["token"])
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

    def _progress_bar(self) -> _Progress | None:
        if not self.progress:
            return None
        models: Sequence[type[QueueMixin]] = self.options.get("models") or []
        return _Progress(models, self.options.get("database"), self.stdout)


class _Progress:
    """A tqdm bar over the rows still due or running, refreshed about once a second."""

    def __init__(self, models: Sequence[type[QueueMixin]], database: str | None, stdout: TextIO) -> None:
        from tqdm import tqdm

        self.models = models
        self.database = database
        self._next = 0.0
        self.start = self._remaining()
        # A pseudo-terminal may report a 0x0 size (e.g. under `script`), and tqdm hides a bar
        # on a screen with no rows: fall back to 100x24.
        size = shutil.get_terminal_size((100, 24))
        self.bar = tqdm(
            total=self.start,
            unit="job",
            file=stdout,
            desc="draining",
            ncols=min(size.columns or 100, 120),
            nrows=size.lines or 24,
        )
        connections.close_all()

    def _remaining(self) -> int:
        total = 0
        for model in self.models:
            qs = model.queue_queryset(self.database or "default")
            total += qs.ready().count() + qs.filter(queue_state=QueueState.RUNNING).count()
        return total

    def refresh_from_db(self, force: bool = False) -> None:
        now = time.monotonic()
        if now < self._next and not force:
            return
        self._next = now + 1.0
        try:
            remaining = self._remaining()
        except DatabaseError:
            return
        finally:
            connections.close_all()
        if remaining > self.start:  # more was enqueued meanwhile
            self.bar.total = self.bar.n + remaining
            self.start = self.bar.total
        self.bar.update(max(self.start - remaining - self.bar.n, 0))

    def close(self) -> None:
        self.refresh_from_db(force=True)
        self.bar.close()


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
