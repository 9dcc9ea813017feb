"""What surrounds one handler call: how the handler is called (its kind, asked once per
model), and what observes it (its span, its run time), so the loop's ``call`` stays one
thing: run the handler, return what it raised."""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .. import metrics, traces

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
