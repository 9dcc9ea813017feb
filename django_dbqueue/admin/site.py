"""The package's own models on the default admin site. No list filter here reads distinct
values from the table (that is a scan at millions of rows): search by kind, key or queue."""

from __future__ import annotations

from typing import Any

import django
from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..messaging.handlers import NAME
from ..models import ArchivedMessage, Message, QueueAttempt, TaskRecord, WorkerProcess
from .changelist import RangeOrderedChangeList
from .display import error_summary, traceback_html, when
from .filters import WholeDayRangeFilter
from .mixin import QueueAdminMixin
from .pagination import EstimatedCountPaginator


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    show_facets = admin.ShowFacets.NEVER

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[RangeOrderedChangeList]:
        # A finished-at range is listed by the finished_at index: by the primary key MariaDB
        # walked back from the newest attempt to the range (1.3 s for three days a week back at
        # 10,000,000 attempts; 21 ms in the index's order).
        return RangeOrderedChangeList

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageForm(forms.ModelForm):
    """What stays editable on a message (its queue and key), checked as ``publish()`` checks
    them: a name no worker serves or a key over the column is a form error, not a row."""

    class Meta:
        model = Message
        fields = ("queue", "key")

    def clean_queue(self) -> str:
        queue = self.cleaned_data["queue"]
        if not NAME.match(queue) or len(queue) > 64:
            raise forms.ValidationError(_("Use 1-64 letters, digits and _ . : -"))
        return queue

    def clean_key(self) -> str | None:
        return self.cleaned_data["key"] or None  # publish() stores no key as NULL, never ""


class EnqueuedCallAdmin(QueueAdminMixin, admin.ModelAdmin):
    """A row a worker executes as it was enqueued: what it calls and with what is read-only
    (an edit would run code or arguments the enqueuer never chose); operators act through the
    queue's actions and row buttons. Rows are enqueued by code (``publish()``,
    ``Task.enqueue()``), which validates them, never added here."""

    #: The enqueued call: never editable after enqueue.
    enqueued_call: tuple[str, ...] = ()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, *(f for f in self.enqueued_call if f not in fields)]


@admin.register(Message)
class MessageAdmin(EnqueuedCallAdmin):
    # The group of a topic's copy and whether a caller waits for a reply (both columns of
    # the row: no query per row); docs/messaging.md.
    list_display = ("__str__", "queue", "kind", "group", "key", "expects_reply")
    search_fields = ("=kind", "=key", "=queue", "=group")
    form = MessageForm
    enqueued_call = ("kind", "payload", "group", "expects_reply", "queue_trace")
    # The dead-letter console may replay a failed message with an edited payload, checked as
    # publish() checks it (the kind, key and queue stay the row's).
    dbqueue_replay_field = "payload"

    def dbqueue_check_replay(self, row: Any, value: Any) -> None:
        Message.objects.check_publish(
            row.kind, value, key=row.key, priority=row.queue_priority, queue=row.queue
        )


@admin.register(TaskRecord)
class TaskRecordAdmin(EnqueuedCallAdmin):
    list_display = ("__str__", "queue", "backend")
    search_fields = ("=task_path", "=queue", "=id")
    # The queue too: a django.tasks Task's queue is part of the task (the backend validates it).
    enqueued_call = (
        "task_path", "queue", "backend", "args", "kwargs", "takes_context", "run_after",
        "return_value", "errors", "worker_ids", "started_at",
    )  # fmt: skip
    # The dead-letter console may replay a failed task with edited arguments, given as
    # {"args": [...], "kwargs": {...}} and checked as Task.enqueue() checks them; what runs
    # (the task path, its queue and backend) stays the record's. Django 6's: on 5.2 there is
    # no django.tasks to check them with (and no record runs), so no such form.
    dbqueue_replay_field = "arguments" if django.VERSION >= (6, 0) else None

    def dbqueue_replay_changes(self, row: Any, value: Any) -> dict[str, Any]:
        # Imported here: django.tasks is Django 6's, and this admin also loads on 5.2 (where
        # no record runs, so none is replayed).
        from ..tasks.backend import stored_arguments

        if not isinstance(value, dict) or not set(value) <= {"args", "kwargs"}:
            raise ValueError('give the arguments as {"args": [...], "kwargs": {...}}')
        args, kwargs = value.get("args", []), value.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError('"args" must be a list and "kwargs" an object')
        args, kwargs = stored_arguments(row.task_path, args, kwargs)
        return {"args": args, "kwargs": kwargs}


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
    # Exact, case-sensitive matches, each served by an index: the model by the timeline index,
    # the object id by (object_id, model), the worker id by its own. ("=field" meant iexact,
    # UPPER(column) = UPPER(term) on PostgreSQL, which no index serves: every search read all
    # attempts, 4.7 s on PostgreSQL and 12.6 s on MariaDB at 10,000,000.) "shop.Order 42"
    # finds one row's attempts: each word must match one of the three.
    search_fields = ("model__exact", "object_id__exact", "worker_id__exact")
    search_help_text = _(
        "An exact model label (shop.Order), object id or worker id; 'shop.Order 42' for one row."
    )
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
