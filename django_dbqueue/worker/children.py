"""A worker process of ``runqueue`` as its supervisor forks and handles it: its process group,
its two pipes (status up, stop down) and how it ended.

How a stop reaches the workers (one design for every way a signal arrives):

* Each worker is a forked child in a **process group of its own**, so whatever a handler
  forks stays in its worker's group: the supervisor signals the group (SIGKILL) when the worker
  exits, on a hard timeout and on "exit now", and nothing a handler started outlives its worker.
* A **graceful stop is never a signal from the supervisor**: it writes one byte on the child's
  *stop pipe*, which a thread of the worker reads (``stop()``: the running job finishes, the
  unstarted rows of its batch are given back). Asking twice is still one stop. So whether the
  SIGTERM reached only the supervisor (``kill -- -PGID``, a terminal's Ctrl-C: the workers are in
  other groups) or every process (systemd's ``KillMode=control-group``: the worker gets its own
  SIGTERM *and* the supervisor's byte), a worker sees one stop. Only a later, separate signal
  exits now: a second signal to the supervisor kills every worker's group; a second signal
  delivered to a worker itself makes it exit at once.
* **Killing the supervisor kills the workers**: the supervisor holds the only write end of each
  stop pipe, so its death (``kill -9 -PGID``, ``kill -9`` of its pid) is an end of file for every
  worker, which then kills its own group at once (issue #20: killing the group stops the
  workers). The children of one supervisor close each other's pipe ends after the fork.
* The **status pipe** (child -> supervisor: stats, held claims, a hard timeout) is close-on-exec,
  closed in whatever a handler forks, and read without blocking, so the supervisor never waits
  on a grandchild that kept it open.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from .loop import Worker

if TYPE_CHECKING:
    from ..models import QueueMixin

logger = logging.getLogger("django_dbqueue.supervisor")


#: Exit code of a child whose handler would not stop at its timeout.
EXIT_HARD_TIMEOUT = 75
#: Exit code of a child that found the setup unusable (a queue table is missing): replacing
#: it would only crash again, so the supervisor stops with the child's message.
EXIT_CONFIG = 78


@dataclass
class Child:
    index: int
    pid: int
    reader: int  # the status pipe's read end (non-blocking)
    stopper: int  # the stop pipe's write end
    buffer: bytes = b""
    stats: dict[str, int] = field(default_factory=dict)
    timeouts: list[dict[str, Any]] = field(default_factory=list)
    #: The claims the child holds now, by token: the model's label (see ``Worker.on_claim``).
    held: dict[int, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)


def fork_worker(index: int, options: dict[str, Any], base_id: str, siblings: list[Child]) -> Child:
    """Fork worker process ``index``; ``siblings``: the workers already running (the child
    closes their pipes). The caller closed its database connections."""
    # Both pipes are close-on-exec (os.pipe()'s default): a program a handler runs does
    # not inherit them.
    reader, writer = os.pipe()
    stop_reader, stopper = os.pipe()
    os.set_blocking(reader, False)  # see Supervisor._drain: a grandchild may hold the write end
    pid = os.fork()
    if pid == 0:  # the child
        # Until the worker installs its own handlers, the supervisor's must not run here;
        # a stop the supervisor sends meanwhile waits in the stop pipe.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        own_group()
        os.close(reader)
        os.close(stopper)
        for other in siblings:  # the other workers' pipes are not ours
            for fd in (other.reader, other.stopper):
                close(fd)
        code = 1
        try:
            code = _worker_main(index, options, base_id, writer, stop_reader)
        except ImproperlyConfigured as exc:
            logger.error("worker process %d stopped: %s", index, exc)
            send(writer, {"fatal": str(exc)})
            code = EXIT_CONFIG
        except BaseException:
            logger.exception("worker process %d crashed", index)
        finally:
            os._exit(code)
    own_group(pid)  # also here: whichever of the two runs first, the group exists
    os.close(writer)
    os.close(stop_reader)
    return Child(index=index, pid=pid, reader=reader, stopper=stopper)


def _worker_main(index: int, options: dict[str, Any], base_id: str, writer: int, stop_reader: int) -> int:
    def report(message: dict[str, Any]) -> None:
        send(writer, message)

    # A process a handler forks (os.fork, multiprocessing) must not keep the status pipe:
    # the supervisor would see its messages as this worker's.
    close_in_forks(writer)

    def hard_timeout(model: type[QueueMixin], pk: Any, token: int, seconds: float) -> None:
        report({"hard_timeout": {"model": model._meta.label, "pk": pk, "token": token, "seconds": seconds}})
        os._exit(EXIT_HARD_TIMEOUT)

    def on_claim(model: type[QueueMixin], token: int, held: bool) -> None:
        report({"held" if held else "dropped": {"model": model._meta.label, "token": token}})

    worker = Worker(
        **{**options, "schedules": options.get("schedules", True) and index == 0},  # 1 per host
        worker_id=f"{base_id}-{index}",
        on_hard_timeout=hard_timeout,
        on_claim=on_claim,
    )
    threading.Thread(
        target=obey_supervisor, args=(stop_reader, worker), name="dbqueue-stop-pipe", daemon=True
    ).start()
    stats = worker.run()
    report({"stats": stats.as_dict()})
    return 0 if worker.fatal is None else 1


def how_it_ended(code: int) -> str:
    """``os.waitstatus_to_exitcode()``'s value in words: "killed by SIGSEGV", "exited with status 3"."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def own_group(pid: int = 0) -> None:
    """Make ``pid`` (0: this process) the leader of a process group of its own."""
    try:
        os.setpgid(pid, 0)
    except OSError:  # the child has exited already, or made its own group first
        pass


def kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def reap_with_group(pid: int) -> int | None:
    """If the worker ``pid`` has exited, kill what is left in its process group (what its
    handlers forked) and reap it; return its wait status, None while it runs.

    The group is killed while the worker is a zombie not yet reaped: until then its pid, which
    is the group's id, cannot be given to another process, so the signal cannot reach a
    stranger."""
    waitid = getattr(os, "waitid", None)
    if waitid is not None:
        try:
            exited = waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return 0
        if exited is None:
            return None
        killpg(pid, signal.SIGKILL)
    try:
        done, status = os.waitpid(pid, 0 if waitid is not None else os.WNOHANG)
    except ChildProcessError:
        return 0
    if done == 0:
        return None
    if waitid is None:
        killpg(pid, signal.SIGKILL)
    return status


def close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def close_in_forks(fd: int) -> None:
    """Close ``fd`` in every process forked from this one (once: a later fork of that process
    must not close whatever reuses the number)."""
    open_here = [True]  # copied into each fork: False there once closed

    def after_fork() -> None:
        if open_here[0]:
            open_here[0] = False
            close(fd)

    os.register_at_fork(after_in_child=after_fork)


def obey_supervisor(stop_reader: int, worker: Worker) -> None:
    """A worker's thread that waits on the stop pipe: a byte is the supervisor's graceful stop
    (however many arrive, one stop); the end of the file means the supervisor died without
    stopping its workers (it was killed), and the worker kills its own group at once."""
    while True:
        try:
            data = os.read(stop_reader, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if data:
            if not worker.stopping:
                logger.info("worker %s: asked to stop, finishing the current job", worker.worker_id)
            worker.stop()
            continue
        logger.warning("worker %s: the supervisor is gone; exiting now", worker.worker_id)
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)


def send(writer: int, message: dict[str, Any]) -> None:
    """Report to the supervisor; if it is gone (killed), there is nobody to tell."""
    try:
        os.write(writer, (json.dumps(message) + "\n").encode())
    except OSError:  # BrokenPipeError: the supervisor died first
        pass
