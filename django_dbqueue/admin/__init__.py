"""The Django admin of django_dbqueue.

* :class:`QueueAdminMixin` (:mod:`.mixin`) — ``class OrderAdmin(QueueAdminMixin, admin.ModelAdmin)``
  for a ``QueueMixin`` model: queue columns, filters, bulk actions (:mod:`.actions`), people
  as consumers (:mod:`.people`), a dashboard (:mod:`.stats`) and a paginator that never counts
  a whole big table (:mod:`.pagination`);
* this module registers the package's own models on the default admin site, like any app's
  ``admin.py``; unregister one (``admin.site.unregister(Message)``) to hide it. No list
  filter here reads distinct values from the table (that is a scan at millions of rows):
  search by kind, key or queue.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from rangefilter.filters import DateTimeRangeFilter

from ..history import QueueAttempt
from ..messages import ArchivedMessage, Message
from ..registry import WorkerProcess
from ..task_records import TaskRecord
from .mixin import HasErrorFilter, QueueAdminMixin, describe_queue_state, error_summary
from .pagination import EstimatedCountPaginator

__all__ = ["HasErrorFilter", "QueueAdminMixin", "describe_queue_state", "error_summary"]


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    show_facets = admin.ShowFacets.NEVER

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(QueueAdminMixin, admin.ModelAdmin):
    list_display = ("__str__", "queue", "kind", "key")
    search_fields = ("=kind", "=key", "=queue")


@admin.register(TaskRecord)
class TaskRecordAdmin(QueueAdminMixin, admin.ModelAdmin):
    list_display = ("__str__", "queue", "backend")
    search_fields = ("=task_path", "=queue", "=id")
    readonly_fields = ("return_value", "errors", "worker_ids", "started_at")


@admin.register(QueueAttempt)
class QueueAttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "model",
        "object_id",
        "attempt",
        "outcome",
        "worker_id",
        "claimed_at",
        "finished_at",
        "error_line",
    )
    list_filter = ("outcome", ("finished_at", DateTimeRangeFilter))
    search_fields = ("=model", "=object_id", "=worker_id")

    @admin.display(description=_("error"))
    def error_line(self, obj: QueueAttempt) -> str:
        return error_summary(obj.error)


@admin.register(ArchivedMessage)
class ArchivedMessageAdmin(ReadOnlyAdmin):
    list_display = ("original_id", "kind", "key", "queue", "state", "attempts", "finished_at", "archived_at")
    list_filter = ("state", ("finished_at", DateTimeRangeFilter))
    search_fields = ("=kind", "=key", "=original_id")


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = ("worker_id", "hostname", "pid", "queue_models", "started_at", "last_seen_at")
    search_fields = ("=hostname", "worker_id")
