"""The signals a worker obeys: its stop signals (SIGTERM, SIGINT: finish the current job, give
the rest back; a second one exits at once) and SIGALRM, which enforces ``queue_timeout``.

Only the main thread can handle signals; a worker run in another thread has no alarm, and
the lease keeper's watch is its only timeout.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from ..exceptions import JobTimeout

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
        if running is not None and not running.finished:
            raise JobTimeout(f"timed out after {running.timeout:g} s")

    for sig in worker.stop_signals:
        signal.signal(sig, on_stop)
    signal.signal(signal.SIGALRM, on_alarm)
    worker.alarm = True

    def restore() -> None:
        worker.alarm = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
