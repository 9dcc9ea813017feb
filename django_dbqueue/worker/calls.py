"""The handler call: one row's ``process()``, run and observed, and what it raised returned.

Its one home: how the handler is called (its kind, asked once per model: plain, async or a
generator by mistake), what observes it (its span, its run time), what bounds it (the alarm
of ``queue_timeout``, the lease keeper's watch) and what it means for the worker (a
``SystemExit`` or ``KeyboardInterrupt`` is a failed attempt, then the worker stops)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, cast

from asgiref.sync import async_to_sync

from ..exceptions import Discard, JobCancelled, JobTimeout, Park
from ..observability import metrics, traces
from .lease import LeaseKeeper, Running
from .stop import StopFlag

if TYPE_CHECKING:
    from ..models import QueueMixin


@functools.cache
def handler_kind(model: type[QueueMixin]) -> str:
    """How ``model.process`` is called, asked once per model rather than once per job."""
    if inspect.iscoroutinefunction(model.process):
        return "async"
    return "generator" if inspect.isgeneratorfunction(model.process) else "plain"


Done = Callable[[BaseException | None], BaseException | None]


@contextlib.contextmanager
def observed(row: QueueMixin) -> Iterator[Done]:
    """Run the caller's block in the job's span (continuing the trace that queued the row)
    and time it; the block hands what the handler raised to the yielded ``done``."""
    started = time.monotonic()
    with traces.job_span(row) as span:

        def done(error: BaseException | None) -> BaseException | None:
            traces.ran(span, error)
            metrics.observe_run(row, time.monotonic() - started)
            return error

        yield done


class HandlerCall:
    """Calls handlers for one worker: ``call(row)`` runs ``row.process()`` and returns what it
    raised (None on success)."""

    def __init__(self, keeper: LeaseKeeper, stop: StopFlag) -> None:
        self.keeper = keeper
        self.stop = stop
        #: SIGALRM enforces ``queue_timeout``: set while the worker's signal handlers are
        #: installed (main thread only; see ``shutdown``).
        self.alarm = False
        #: Whether spans go anywhere, as :meth:`for_claim` found it; None: asked per job.
        self.tracing: bool | None = None

    def for_claim(self) -> None:
        """Ask once for a claim's jobs whether spans go anywhere: ``traces.active()`` reads the
        environment, a cost per job of a lease-mode claim of hundreds. A tracer provider set
        by a handler then takes effect from the next claim on."""
        self.tracing = traces.active()

    def __call__(self, row: QueueMixin) -> BaseException | None:
        """Run one handler, in its span and timed; return what it raised (None on success)."""
        if not (traces.active() if self.tracing is None else self.tracing):
            # No span to open: only the timing, without the two context managers per job.
            started = time.monotonic()
            error = self._call(row)
            metrics.observe_run(row, time.monotonic() - started)
            return error
        with observed(row) as done:
            return done(self._call(row))

    def _call(self, row: QueueMixin) -> BaseException | None:
        timeout = type(row).queue_timeout
        # Known to the keeper even without a timeout: a cancel request interrupts it.
        token = row._queue_claim.token if row._queue_claim else 0
        running = Running(type(row), row.pk, token, float(timeout or 0), time.monotonic())
        self.keeper.running = running
        if timeout and self.alarm:
            signal.setitimer(signal.ITIMER_REAL, float(timeout))
        try:
            kind = handler_kind(type(row))
            if kind == "async":
                # Run in this thread's event loop; the ORM calls it makes through
                # sync_to_async come back to this thread, its connection and its transaction.
                async_to_sync(cast(Callable[[], Awaitable[None]], row.process))()
            elif kind == "generator":
                raise Discard(
                    f"{type(row).__name__}.process() is a generator function: calling it runs nothing"
                )
            else:
                row.process()
            return None
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            return exc
        except BaseException as exc:  # noqa: BLE001 - JobTimeout, Park, SystemExit, KeyboardInterrupt
            if not isinstance(exc, (JobTimeout, JobCancelled, Park)):
                # A failed attempt like any other; then this worker stops: the handler asked
                # the process to exit, and the supervisor decides what follows.
                self.stop.fatal = exc
            return exc
        finally:
            running.finished = True
            if timeout and self.alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self.keeper.running = None
