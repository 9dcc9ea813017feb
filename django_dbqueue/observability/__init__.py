"""Observability: Prometheus metrics, OpenTelemetry traces and the queue's status
(docs/observability.md).

Modules by concept: ``metrics`` (counters from the queue's signals, the collector of table
gauges, ``metrics_view``), ``exporter`` (the ``runqueue --metrics-port`` process that serves
them), ``status`` (``manage.py queuestatus``), ``traces`` (the trace context an enqueue stores
and the worker's span continues), ``trace_mixin`` (``QueueTraceMixin``, the column that stores
it, re-exported by ``django_dbqueue.models``).

``traces`` and ``trace_mixin`` import nothing above the foundation: the engine, the worker and
the models stand on them, so this module imports nothing eagerly; ``metrics_view`` (which needs
the models) is imported when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .metrics import metrics_view

__all__ = ["metrics_view"]


def __getattr__(name: str) -> Any:
    if name == "metrics_view":
        from .metrics import metrics_view

        return metrics_view
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
