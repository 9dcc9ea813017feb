"""The signals a worker obeys: its stop signals (SIGTERM, SIGINT: finish the current job, give
the rest back; a second one exits at once) and SIGALRM, which enforces ``queue_timeout``.

A worker of ``runqueue`` is also stopped by its supervisor, through a pipe rather than a signal
(see ``supervisor``): a signal here is one that reached this process itself, so the second one
is a person's (or systemd's) later, separate signal, never a copy of the first.

A process a handler forks inherits these handlers, but they are the worker's, not its: there
they put back the default action and deliver the signal again, so the child dies of SIGTERM as
any process would instead of "finishing its current job" forever.

Only the main thread can handle signals; a worker run in another thread has no alarm, and
the lease keeper's watch is its only timeout, and a cancel request cannot interrupt its handler.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

from ..exceptions import JobCancelled, JobTimeout
from .calls import HandlerCall
from .stop import StopFlag

logger = logging.getLogger("django_dbqueue.worker")


def install_signals(
    worker_id: str, stop_signals: Sequence[int], stop: StopFlag, call: HandlerCall
) -> Callable[[], None]:
    """Install the handlers of worker ``worker_id``: ``stop_signals`` set ``stop``, SIGALRM
    interrupts what ``call`` runs (its lease keeper's ``running``). Return what restores the
    previous ones."""
    keeper = call.keeper
    handled = (*stop_signals, signal.SIGALRM)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    owner = os.getpid()
    #: Stop signals this process itself received. Not ``stop.stopping``: the supervisor's stop
    #: (a byte on the pipe, read by another thread) may be read before the signal that came
    #: with it is handled (the main thread runs Python signal handlers only between bytecodes,
    #: late on a loaded machine), and must not make that signal look like a second one.
    signalled: list[int] = []

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            _as_default(signum)
            return
        if signalled:
            logger.warning("worker %s: second signal, exiting now", worker_id)
            os._exit(128 + signum)
        signalled.append(signum)
        if not stop.stopping:
            logger.info(
                "worker %s: %s received, finishing the current job (signal again to exit now)",
                worker_id,
                signal.Signals(signum).name,
            )
        stop.stop()

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            _as_default(signum)
            return
        running = keeper.running
        if running is None or running.finished:
            return
        if running.cancelled:
            raise JobCancelled(running.cancelled)
        # The alarm may be the keeper's, sent for a job that ended just before: only a job
        # past its own deadline times out.
        if running.timeout and time.monotonic() - running.started >= running.timeout - 0.01:
            raise JobTimeout(f"timed out after {running.timeout:g} s")

    for sig in stop_signals:
        signal.signal(sig, on_stop)
    signal.signal(signal.SIGALRM, on_alarm)
    call.alarm = True
    main = threading.get_ident()
    keeper.interrupt = lambda: signal.pthread_kill(main, signal.SIGALRM)

    def restore() -> None:
        call.alarm = False
        keeper.interrupt = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _as_default(signum: int) -> None:
    """In a process a handler forked: act as if the worker had never handled ``signum``."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
