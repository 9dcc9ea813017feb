"""OpenTelemetry spans of the queue (the ``[otel]`` extra: ``opentelemetry-api``).

* **enqueue**: a PRODUCER span where a row is queued; its context (W3C ``traceparent`` and
  ``tracestate``) is stored on the row, in the ``queue_trace`` column of models that have it
  (``Message``, ``TaskRecord``, and any model that adds :class:`~django_dbqueue.models.
  QueueTraceMixin`);
* **claim**: an INTERNAL span per claimed batch of a worker;
* **job run**: a CONSUMER span around each ``process()``, a child of the stored context, so
  the request that enqueued the row and the job that ran it are one trace. Attributes:
  ``dbqueue.model``, ``dbqueue.queue``, ``dbqueue.attempt``, ``dbqueue.outcome`` (``parked``
  for a durable workflow's run that parked its row);
* **workflow step**: an INTERNAL span around each step a workflow's run executes (not those it
  replays), a child of the job span: ``dbqueue.step`` names it.

Zero cost when ``opentelemetry`` is not installed (nothing is imported or connected), and
close to zero when it is installed but no tracer provider was configured: :func:`active` is
one look at the global provider, and nothing else runs.

Nothing imports ``opentelemetry`` here until something else did (a process that configures a
tracer provider imports the API to do it) or ``OTEL_PYTHON_TRACER_PROVIDER`` names one: a
worker that traces nothing does not pay the import at start-up.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..exceptions import Park

if TYPE_CHECKING:
    from django.db.models import Model

#: Where a row keeps the context of the span that queued it.
FIELD = "queue_trace"
#: The column's size: a traceparent is 55 characters; a long tracestate is cut (not split).
MAX_LENGTH = 512
SYSTEM = "django_dbqueue"


@functools.cache
def installed() -> bool:
    """Whether the ``[otel]`` extra is installed (found, not imported)."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


def _trace() -> Any:
    from opentelemetry import trace

    return trace


def active() -> bool:
    """Whether spans go anywhere: the API is installed and a real tracer provider is set
    (the default one is a proxy to nothing). A provider is set by code that imported the API,
    or named by ``OTEL_PYTHON_TRACER_PROVIDER``: without either, nothing is imported."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        if not os.environ.get("OTEL_PYTHON_TRACER_PROVIDER") or not installed():
            return False
        trace = _trace()
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def traced(model: type[Model]) -> bool:
    """Whether ``model`` stores the trace context of its rows."""
    return any(field.name == FIELD for field in model._meta.concrete_fields)


def _tracer() -> Any:
    from .. import __version__

    return _trace().get_tracer(SYSTEM, __version__)


def _attributes(row: Any, **more: Any) -> dict[str, Any]:
    found = {"messaging.system": SYSTEM, "dbqueue.model": row._meta.label}
    queue = row.__dict__.get("queue")  # never loads a deferred field
    if isinstance(queue, str):
        found["dbqueue.queue"] = queue
    found.update({key: value for key, value in more.items() if value is not None})
    return found


def _carrier_text() -> str:
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    text = "\n".join(f"{key}:{value}" for key, value in sorted(carrier.items()))
    return text[:MAX_LENGTH]


def enqueue_context(model: type[Model], count: int | None = None, row: Any = None) -> str | None:
    """Record an enqueue span and return its context for the row(s), or None when no
    tracing is configured. ``count``: rows queued by one bulk statement."""
    if not active():
        return None
    name = f"enqueue {model._meta.label}"
    attributes: dict[str, Any] = _attributes(row) if row is not None else {"messaging.system": SYSTEM}
    attributes["dbqueue.model"] = model._meta.label
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    with _tracer().start_as_current_span(name, kind=_trace().SpanKind.PRODUCER, attributes=attributes):
        return _carrier_text()


def stamp(model: type[Model], values: dict[str, Any] | None = None, rows: list[Any] | None = None) -> None:
    """Store one enqueue span's context in the UPDATE ``values`` or on the new ``rows`` of a
    bulk enqueue (nothing when the model keeps no context or nothing is traced)."""
    if not traced(model) or not active():
        return
    text = enqueue_context(model, count=len(rows) if rows is not None else None)
    if values is not None:
        values[FIELD] = text
    for row in rows or ():
        if not getattr(row, FIELD):
            setattr(row, FIELD, text)


def on_pre_save(sender: type[Model], instance: Any, raw: bool = False, **kwargs: Any) -> None:
    """A new READY row saved one by one (``create()``, ``save()``, ``publish()``, a task's
    enqueue) gets the context of its own enqueue span."""
    if raw or not instance._state.adding or getattr(instance, FIELD) or not active():
        return
    if instance.queue_state == "ready":
        setattr(instance, FIELD, enqueue_context(sender, row=instance))


def context_of(text: str | None) -> Any:
    """The OpenTelemetry context stored on a row (None: the current one)."""
    if not text:
        return None
    from opentelemetry import propagate

    carrier = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return propagate.extract(carrier)


@contextlib.contextmanager
def claim_span(model: type[Model], worker_id: str) -> Iterator[list[int]]:
    """A span of one claim of a worker, recorded only when it took rows (an idle worker's
    empty polls would drown the traces): the block puts the number it took in the list."""
    taken = [0]
    if not active():
        yield taken
        return
    started = time.time_ns()
    yield taken
    if taken[0]:
        attributes = {
            "messaging.system": SYSTEM,
            "dbqueue.model": model._meta.label,
            "dbqueue.worker": worker_id,
            "messaging.batch.message_count": taken[0],
        }
        _tracer().start_span(f"claim {model._meta.label}", start_time=started, attributes=attributes).end()


@contextlib.contextmanager
def job_span(row: Any) -> Iterator[Any]:
    """The span of one ``process()`` call, continuing the trace that queued the row."""
    if not active():
        yield None
        return
    parent = context_of(row.__dict__.get(FIELD))
    attributes = _attributes(row, **{"dbqueue.attempt": row.queue_attempts, "dbqueue.pk": str(row.pk)})
    with _tracer().start_as_current_span(
        f"process {row._meta.label}",
        context=parent,
        kind=_trace().SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,  # the handler's error is recorded below, and the worker goes on
        set_status_on_exception=False,
    ) as span:
        yield span


@contextlib.contextmanager
def step_span(row: Any, name: str) -> Iterator[Any]:
    """The span of one step of a durable workflow (``wf.step()``), a child of its run's job
    span; a step that raises has its error recorded, and the error goes on up."""
    if not active():
        yield None
        return
    attributes = _attributes(row, **{"dbqueue.pk": str(row.pk), "dbqueue.step": name})
    with _tracer().start_as_current_span(f"step {name}", attributes=attributes) as span:
        yield span


def ran(span: Any, error: BaseException | None) -> None:
    """Close a job span with its outcome."""
    if span is None:
        return
    if error is None or isinstance(error, Park):
        # A parked run (a workflow's next step, sleep or wait) ended as it meant to.
        span.set_attribute("dbqueue.outcome", "succeeded" if error is None else "parked")
        return
    span.set_attribute("dbqueue.outcome", "failed")
    span.record_exception(error)
    trace = _trace()
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
