"""Prometheus metrics of the queue (the ``[metrics]`` extra: ``prometheus_client``).

Two kinds, kept apart on purpose:

* **what workers did** (jobs claimed, succeeded, failed, retried, rescued, rejected late; job
  duration and pickup latency): counters and histograms fed by the queue's own signals
  (:mod:`django_dbqueue.signals`), so the outcomes have one code path and metrics only listen.
  The run time of a job is observed by the worker around ``process()``. Under ``runqueue
  --concurrency N`` each worker process writes its numbers to ``PROMETHEUS_MULTIPROC_DIR``
  (prometheus_client's multiprocess mode) and one exporter sums them on each scrape;
* **what the database holds now** (ready rows per model, age of the oldest due row, live
  workers): read from the database on each scrape by :class:`QueueCollector`, with bounded,
  index-only statements, so any process (a web server's view, the exporter) reports the same.

Without ``prometheus_client`` nothing here is connected and nothing costs anything.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError, router
from django.http import HttpRequest, HttpResponse

from .. import signals
from ..queue import extensions
from ..queue.mixin import queue_models
from ..tables.worker_process import WorkerProcess
from .status import oldest_wait

if TYPE_CHECKING:
    from ..queue.mixin import QueueMixin
    from ..queue.row import QueueRow

T = TypeVar("T")

logger = logging.getLogger("django_dbqueue.metrics")

#: Ready rows counted exactly per model; above it the gauge says this many (a bounded count).
DEPTH_LIMIT = 100_000
#: Seconds: from a few milliseconds of a quick job to the lease of a slow one.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Seconds a due row waited for a worker.
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400)
LABELS = ("model", "queue")


def available() -> bool:
    return importlib.util.find_spec("prometheus_client") is not None


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class _Metrics:
    """The counters and histograms, made on first use: in multiprocess mode each value
    writes to a file of its process, chosen when prometheus_client makes it."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        def counter(name: str, what: str) -> Any:
            return Counter(f"dbqueue_jobs_{name}", what, LABELS)

        self.claimed = counter("claimed", "Rows claimed by workers.")
        self.succeeded = counter("succeeded", "Jobs whose success was recorded.")
        self.failed = counter("failed", "Jobs that failed for good (ended FAILED).")
        self.retried = counter("retried", "Failed attempts that will be retried.")
        self.cancelled = counter("cancelled", "Jobs ended CANCELLED while claimed (an operator asked).")
        self.rescued = counter("rescued", "Rows whose lease ran out, taken back by the rescue.")
        self.rejected = counter("rejected_late", "Late outcomes rejected: the claim was lost.")
        self.duration = Histogram(
            "dbqueue_job_duration_seconds", "Run time of process().", LABELS, buckets=DURATION_BUCKETS
        )
        self.latency = Histogram(
            "dbqueue_job_pickup_latency_seconds",
            "From the time a row was due to its claim (database clock).",
            LABELS,
            buckets=LATENCY_BUCKETS,
        )
        # A durable workflow's steps (wf.step()), by model, queue and step name: names come from
        # the handler's code, so the label's values are few.
        step_labels = (*LABELS, "step")
        self.step_duration = Histogram(
            "dbqueue_workflow_step_duration_seconds",
            "Run time of a workflow step (wf.step()).",
            step_labels,
            buckets=DURATION_BUCKETS,
        )
        self.steps = Counter(
            "dbqueue_workflow_steps", "Workflow steps run, by outcome.", (*step_labels, "outcome")
        )
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}

    def of(self, name: str, key: tuple[str, ...]) -> Any:
        """The child of metric ``name`` for the labels ``key``. prometheus_client's
        ``labels()`` checks the labels and takes a lock on every call; the receivers run for
        every job and ask for the same few children, so each is asked for once (it always
        returns the same child for the same labels)."""
        child = self._children.get((name, key))
        if child is None:
            child = self._children[(name, key)] = getattr(self, name).labels(*key)
        return child


_metrics: _Metrics | None = None


def metrics() -> _Metrics:
    global _metrics
    if _metrics is None:
        _metrics = _Metrics()
    return _metrics


def labels(row: QueueRow) -> tuple[str, str]:
    # Only Message and TaskRecord (and models like them) have a queue column; a deferred one
    # is not loaded for a label.
    queue = row.__dict__.get("queue", "")
    return row._meta.label, queue if isinstance(queue, str) else ""


# -- receivers: the queue's signals, counted ------------------------------------------------------


def on_claimed(sender: Any, rows: list[QueueMixin], **kwargs: Any) -> None:
    m = metrics()
    claimed: dict[tuple[str, str], int] = {}
    for row in rows:
        key = labels(row)
        claimed[key] = claimed.get(key, 0) + 1
        if row.queue_last_attempt_at and row.queue_run_at:
            waited = (row.queue_last_attempt_at - row.queue_run_at).total_seconds()
            m.of("latency", key).observe(max(waited, 0.0))
    for key, count in claimed.items():  # a claim's rows share their labels: one add each
        m.of("claimed", key).inc(count)


def count_succeeded(model: type[QueueRow], rows: Sequence[QueueRow]) -> None:
    """The successes of one committed write (``queue.extensions.succeeded``): one add per
    label, where a ``job_succeeded`` receiver was a signal and an add per row."""
    succeeded: dict[tuple[str, str], int] = {}
    for row in rows:
        key = labels(row)
        succeeded[key] = succeeded.get(key, 0) + 1
    m = metrics()
    for key, count in succeeded.items():
        m.of("succeeded", key).inc(count)


def on_failed(sender: Any, row: QueueMixin, retry_at: Any, **kwargs: Any) -> None:
    metrics().of("failed" if retry_at is None else "retried", labels(row)).inc()


def on_cancelled(sender: Any, row: QueueMixin, **kwargs: Any) -> None:
    metrics().of("cancelled", labels(row)).inc()


def on_rescued(sender: Any, count: int, **kwargs: Any) -> None:
    metrics().of("rescued", (sender._meta.label, "")).inc(count)


def on_rejected(sender: Any, row: QueueMixin, **kwargs: Any) -> None:
    metrics().of("rejected", labels(row)).inc()


def observe_run(row: QueueMixin, seconds: float) -> None:
    """The worker's report of one ``process()`` call."""
    if _connected:
        metrics().of("duration", labels(row)).observe(seconds)


def run_step(row: QueueRow, step: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)``, the step ``step`` of ``row``'s workflow run, timed; an
    exception out of it counts the step failed, and goes on up. (A function, not a context
    manager: a 1-step run pays for each call, and a generator's block costs five.)"""
    if not _connected:
        return fn(*args, **kwargs)
    started = time.perf_counter()
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        observe_step(row, step, time.perf_counter() - started, failed=True)
        raise
    observe_step(row, step, time.perf_counter() - started, failed=False)
    return result


def observe_step(row: QueueRow, step: str, seconds: float, failed: bool) -> None:
    """A workflow's report of one step it ran (``wf.step()``): its run time and whether it
    raised. A step whose checkpoint was then rolled back (atomic mode, a failed commit) was
    still run, and counts."""
    if _connected:
        m = metrics()
        key = (*labels(row), step)
        m.of("step_duration", key).observe(seconds)
        m.of("steps", (*key, "failed" if failed else "succeeded")).inc()


_connected = False


def connect() -> None:
    """Count the queue's signals and its successes (at app start, when prometheus_client is
    installed)."""
    global _connected
    if _connected or not available():
        return
    for signal, receiver in (
        (signals.job_claimed, on_claimed),
        (signals.job_failed, on_failed),
        (signals.job_cancelled, on_cancelled),
        (signals.job_rescued, on_rescued),
        (signals.job_rejected, on_rejected),
    ):
        signal.connect(receiver, dispatch_uid=f"django_dbqueue.metrics.{receiver.__name__}")
    extensions.succeeded.register("metrics", count_succeeded)
    _connected = True


# -- what the database holds, read at each scrape -----------------------------------------------------


class QueueCollector:
    """Gauges read from the database when scraped: ready rows per model (counted up to
    :data:`DEPTH_LIMIT`), the age of the oldest due row, live workers. Each statement stays
    in the claim index (``queue_state`` first) or the workers' small table."""

    def __init__(self, models: list[type[QueueMixin]] | None = None, using: str | None = None) -> None:
        self.models = models  # None: every installed queue model
        self.using = using

    def describe(self) -> list[Any]:
        return []  # read at scrape time only: nothing is queried when it is registered

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        depth = GaugeMetricFamily(
            "dbqueue_queue_depth", f"Due READY rows (counted up to {DEPTH_LIMIT}).", labels=["model"]
        )
        oldest = GaugeMetricFamily(
            "dbqueue_oldest_ready_age_seconds",
            "How long the oldest due READY row has waited.",
            labels=["model"],
        )
        workers = GaugeMetricFamily("dbqueue_workers", "Live worker processes (seen within 3 heartbeats).")
        try:
            for model in self.models or queue_models():
                using = self.using or router.db_for_read(model)
                ready = model.queue_queryset(using).ready().order_by()
                depth.add_metric([model._meta.label], ready.values("pk")[:DEPTH_LIMIT].count())
                waited = oldest_wait(model.queue_queryset(using))
                oldest.add_metric([model._meta.label], waited.total_seconds() if waited else 0.0)
            table = WorkerProcess
            workers.add_metric([], table._default_manager.using(self.using or "default").alive().count())
        except DatabaseError as exc:
            logger.warning("queue metrics not read from the database: %s", exc)
            return
        yield from (depth, oldest, workers)


_collector_registered = False


def registry(collector: QueueCollector | None = None) -> Any:
    """The registry to expose: in multiprocess mode the sum of every process's files, else
    this process's default registry; either way with the database's gauges."""
    global _collector_registered
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    if multiprocess():
        found = CollectorRegistry()
        MultiProcessCollector(found)
        found.register(collector or QueueCollector())
        return found
    if not _collector_registered:
        REGISTRY.register(QueueCollector())
        _collector_registered = True
    return REGISTRY


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics in Prometheus's text format: ``path("metrics/", metrics_view)``. It shows
    no job data, only counts; protect it like any internal endpoint (see docs/observability.md)."""
    if not available():
        return HttpResponse("prometheus_client is not installed\n", status=501, content_type="text/plain")
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
