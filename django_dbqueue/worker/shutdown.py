"""The signals a worker obeys: its stop signals (SIGTERM, SIGINT: finish the current job, give
the rest back; a second one exits at once) and SIGALRM, which enforces ``queue_timeout``.

Only the main thread can handle signals; a worker run in another thread has no alarm, and
the lease keeper's watch is its only timeout, and a cancel request cannot interrupt its handler.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from ..exceptions import JobCancelled, JobTimeout

if TYPE_CHECKING:
    from .loop import Worker

logger = logging.getLogger("django_dbqueue.worker")


def install_signals(worker: Worker) -> Callable[[], None]:
    """Install the worker's handlers; return what restores the previous ones."""
    handled = (*worker.stop_signals, signal.SIGALRM)
    previous = {sig: signal.getsignal(sig) for sig in handled}

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if worker.stopping:
            logger.warning("worker %s: second signal, exiting now", worker.worker_id)
            os._exit(128 + signum)
        logger.info(
            "worker %s: %s received, finishing the current job (signal again to exit now)",
            worker.worker_id,
            signal.Signals(signum).name,
        )
        worker.stop()

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        running = worker.keeper.running
        if running is None or running.finished:
            return
        if running.cancelled:
            raise JobCancelled(running.cancelled)
        # The alarm may be the keeper's, sent for a job that ended just before: only a job
        # past its own deadline times out.
        if running.timeout and time.monotonic() - running.started >= running.timeout - 0.01:
            raise JobTimeout(f"timed out after {running.timeout:g} s")

    for sig in worker.stop_signals:
        signal.signal(sig, on_stop)
    signal.signal(signal.SIGALRM, on_alarm)
    worker.alarm = True
    main = threading.get_ident()
    worker.keeper.interrupt = lambda: signal.pthread_kill(main, signal.SIGALRM)

    def restore() -> None:
        worker.alarm = False
        worker.keeper.interrupt = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
