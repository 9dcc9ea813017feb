"""``QueueTraceMixin``: a column that keeps the trace context of the span that queued a row, so
the worker's span of its job continues the same trace (see :mod:`django_dbqueue.observability.traces`).

Opt-in, and not part of ``QueueMixin``: a column on every queue model would give every
project's domain tables a migration for a feature many do not use. ``Message`` and
``TaskRecord`` have it; add it to a model of yours with ``class Order(QueueTraceMixin,
QueueMixin)`` and a migration (a nullable column: no rewrite of existing rows on MariaDB
10.3+, MySQL 8 and PostgreSQL).
"""

from __future__ import annotations

from django.db import models

from .traces import MAX_LENGTH


class QueueTraceMixin(models.Model):
    queue_trace = models.CharField(
        "trace context",
        max_length=MAX_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text="W3C trace context of the enqueue span (traceparent, tracestate).",
    )

    class Meta:
        abstract = True
