"""The package's own models on the default admin site. No list filter here reads distinct
values from the table (that is a scan at millions of rows): search by kind, key or queue."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..models import ArchivedMessage, Message, QueueAttempt, TaskRecord, WorkerProcess
from .display import error_summary, traceback_html, when
from .filters import WholeDayRangeFilter
from .mixin import QueueAdminMixin
from .pagination import EstimatedCountPaginator


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
    # The group of a topic's copy and whether a caller waits for a reply (both columns of
    # the row: no query per row); docs/messaging.md.
    list_display = ("__str__", "queue", "kind", "group", "key", "expects_reply")
    search_fields = ("=kind", "=key", "=queue", "=group")


@admin.register(TaskRecord)
class TaskRecordAdmin(QueueAdminMixin, admin.ModelAdmin):
    list_display = ("__str__", "queue", "backend")
    search_fields = ("=task_path", "=queue", "=id")
    readonly_fields = ("return_value", "errors", "worker_ids", "started_at")


def _time(field: str, label: Any) -> Any:
    @admin.display(description=label, ordering=field)
    def column(self: Any, obj: Any) -> str:
        return when(getattr(obj, field))

    return column


@admin.register(QueueAttempt)
class QueueAttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "model",
        "object_id",
        "attempt",
        "outcome",
        "worker_id",
        "claimed",
        "finished",
        "error_line",
    )
    list_filter = ("outcome", ("finished_at", WholeDayRangeFilter))
    search_fields = ("=model", "=object_id", "=worker_id")
    fields = (
        "model",
        "object_id",
        "attempt",
        "outcome",
        "worker_id",
        "enqueued",
        "due",
        "claimed",
        "finished",
        "error_text",
    )
    readonly_fields = ("enqueued", "due", "claimed", "finished", "error_text")

    enqueued = _time("enqueued_at", _("enqueued at"))
    due = _time("due_at", _("due at"))
    claimed = _time("claimed_at", _("claimed at"))
    finished = _time("finished_at", _("finished at"))

    @admin.display(description=_("error"))
    def error_line(self, obj: QueueAttempt) -> str:
        return error_summary(obj.error)

    @admin.display(description=_("error"))
    def error_text(self, obj: QueueAttempt) -> str:
        return traceback_html(obj.error)


@admin.register(ArchivedMessage)
class ArchivedMessageAdmin(ReadOnlyAdmin):
    list_display = ("original_id", "kind", "key", "queue", "state", "attempts", "finished", "archived")
    list_filter = ("state", ("finished_at", WholeDayRangeFilter))
    search_fields = ("=kind", "=key", "=original_id")
    exclude = ("last_error",)
    readonly_fields = ("last_error_text",)

    finished = _time("finished_at", _("finished at"))
    archived = _time("archived_at", _("archived at"))

    @admin.display(description=_("last error"))
    def last_error_text(self, obj: ArchivedMessage) -> str:
        return traceback_html(obj.last_error)


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = ("worker_id", "hostname", "pid", "queue_models", "started", "last_seen")

    started = _time("started_at", _("started at"))
    last_seen = _time("last_seen_at", _("last seen at"))
    search_fields = ("=hostname", "worker_id")
