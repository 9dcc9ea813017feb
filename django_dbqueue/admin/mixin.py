"""``QueueAdminMixin``: moderate a queue model in the Django admin.

``class OrderAdmin(QueueAdminMixin, admin.ModelAdmin)`` adds, beside the model's own
``list_display``, ``list_filter``, ``search_fields`` and actions:

* queue columns (a readable state, priority, run at, attempts, the last error's summary);
* queue filters (state, has error, date ranges, priority and attempt ranges);
* bulk actions that are each ONE UPDATE or DELETE over the selection or the whole filtered
  set, never touching a RUNNING row (it belongs to its worker), reporting what they skipped;
* read-only queue columns in the change form, with the full traceback;
* a dashboard per model, and "people as consumers": take the next N items (the same atomic
  claim the workers use, leased to ``user:<username>``), "my items", done / failed / defer /
  hand back (see :mod:`django_dbqueue.admin.people`);
* a paginator that never runs a full ``COUNT(*)`` (:mod:`django_dbqueue.admin.pagination`).

Everything is configured by ``dbqueue_*`` class attributes; see docs/admin.md.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from rangefilter.filters import DateTimeRangeFilter, NumericRangeFilter

from ..history import QueueAttempt, history_enabled
from ..models import QUEUE_FIELDS
from ..states import QueueState
from .actions import ActionsAdminMixin
from .pagination import EstimatedCountPaginator
from .people import PeopleAdminMixin
from .stats import queue_stats

__all__ = ["HasErrorFilter", "QueueAdminMixin", "describe_queue_state", "error_summary"]


class HasErrorFilter(admin.SimpleListFilter):
    title = _("has error")
    parameter_name = "queue_has_error"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("With an error")), ("no", _("Without an error"))]

    def queryset(self, request: HttpRequest, queryset: models.QuerySet) -> models.QuerySet:
        if self.value() == "yes":
            # A success clears the error, so SUCCEEDED rows (most of a big table) never match:
            # naming the other states lets the state index skip them instead of a full scan.
            others = [state for state in QueueState.values if state != QueueState.SUCCEEDED]
            return queryset.filter(queue_state__in=others).exclude(queue_last_error="")
        if self.value() == "no":
            return queryset.filter(queue_last_error="")
        return queryset


def describe_queue_state(row: Any, now: Any = None) -> str:
    """A person's reading of the row's state: "retrying, attempt 3 of 8", "scheduled", …"""
    now = now or timezone.now()
    state = row.queue_state
    attempts = row.queue_attempts
    max_attempts = getattr(type(row).queue_retry, "max_attempts", None)
    of = f" of {max_attempts}" if max_attempts else ""
    if state == QueueState.READY:
        if attempts and row.queue_last_error:
            return f"retrying, attempt {attempts + 1}{of}"
        if row.queue_run_at and row.queue_run_at > now:
            return "scheduled"
        return "ready"
    if state == QueueState.RUNNING:
        who = f" by {row.queue_locked_by}" if row.queue_locked_by else ""
        expired = " (lease expired)" if row.queue_locked_until and row.queue_locked_until < now else ""
        return f"running{who}, attempt {attempts}{of}{expired}"
    if state == QueueState.FAILED:
        return ngettext("failed after %d attempt", "failed after %d attempts", attempts) % attempts
    return str(QueueState(state).label).lower() if state in QueueState.values else str(state)


def error_summary(text: str, length: int = 120) -> str:
    """One line that says what went wrong: a traceback's exception line, else the first line."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return Truncator(line.strip()).chars(length)


class QueueAdminMixin(ActionsAdminMixin, PeopleAdminMixin):
    """Mix into a ``ModelAdmin`` of a ``QueueMixin`` model (before ``admin.ModelAdmin``)."""

    #: Columns added after the model admin's own ``list_display``.
    dbqueue_list_display: tuple[str, ...] = (
        "dbqueue_state",
        "queue_priority",
        "queue_run_at",
        "queue_attempts",
        "dbqueue_error",
    )
    #: Filters added after the model admin's own ``list_filter``.
    dbqueue_list_filter: tuple[Any, ...] = (
        "queue_state",
        HasErrorFilter,
        ("queue_run_at", DateTimeRangeFilter),
        ("queue_enqueued_at", DateTimeRangeFilter),
        ("queue_last_attempt_at", DateTimeRangeFilter),
        ("queue_finished_at", DateTimeRangeFilter),
        ("queue_priority", NumericRangeFilter),
        ("queue_attempts", NumericRangeFilter),
    )
    #: Actions added after the model admin's own ``actions``.
    dbqueue_actions: tuple[str, ...] = (
        "dbqueue_retry_now",
        "dbqueue_reprioritize",
        "dbqueue_reschedule",
        "dbqueue_cancel",
        "dbqueue_enqueue_again",
        "dbqueue_delete",
    )
    #: Drop Django's ``delete_selected`` (it loads every object it deletes) for ``dbqueue_delete``.
    dbqueue_replace_delete_selected: bool = True
    #: Show the queue columns in their own, read-only fieldset of the change form.
    dbqueue_fieldset: bool = True

    # A changelist never counts the whole table, and counts big filtered sets approximately.
    show_full_result_count = False
    # Facet counts aggregate every filter over the whole filtered set: minutes at 10M rows.
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    change_list_template = "admin/django_dbqueue/change_list.html"
    dbqueue_dashboard_template = "admin/django_dbqueue/dashboard.html"

    def __init__(self, model: type[models.Model], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        if self.actions is not None:
            own = list(self.actions)
            self.actions = [*own, *(name for name in self.dbqueue_actions if name not in own)]

    # -- composition with the model's own admin ----------------------------------------------

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        own = list(super().get_list_display(request))
        return [*own, *(c for c in self.dbqueue_list_display if c not in own)]

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        own = list(super().get_list_filter(request))
        return [*own, *(f for f in self.dbqueue_list_filter if f not in own)]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        if self.dbqueue_replace_delete_selected and "dbqueue_delete" in actions:
            actions.pop("delete_selected", None)
        return actions

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        own = list(super().get_readonly_fields(request, obj))
        queue = [f for f in QUEUE_FIELDS if f != "queue_last_error"] + [
            "dbqueue_last_error",
            "dbqueue_history",
        ]
        return [*own, *(f for f in queue if f not in own)]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fieldsets = list(super().get_fieldsets(request, obj))
        if not self.dbqueue_fieldset:
            return fieldsets
        queue = {*QUEUE_FIELDS, "dbqueue_last_error", "dbqueue_history"}
        shown: set[str] = set()
        cleaned = []
        for name, options in fieldsets:
            fields = [f for f in options.get("fields", ()) if isinstance(f, (list, tuple)) or f not in queue]
            shown.update(f for f in options.get("fields", ()) if isinstance(f, str))
            if fields:
                cleaned.append((name, {**options, "fields": fields}))
        if self.fieldsets is not None and shown & queue:
            return fieldsets  # the model admin placed the queue fields itself
        order = [f for f in QUEUE_FIELDS if f not in ("queue_last_error", "queue_token")]
        extra = ["dbqueue_last_error", "dbqueue_history"] if obj is not None else ["dbqueue_last_error"]
        return [*cleaned, (_("Queue"), {"fields": [*order, *extra]})]

    # -- columns -------------------------------------------------------------------------

    @admin.display(description=_("queue state"), ordering="queue_state")
    def dbqueue_state(self, obj: Any) -> str:
        return describe_queue_state(obj)

    @admin.display(description=_("last error"))
    def dbqueue_error(self, obj: Any) -> str:
        return error_summary(obj.queue_last_error)

    @admin.display(description=_("last error"))
    def dbqueue_last_error(self, obj: Any) -> str:
        if obj is None or not obj.queue_last_error:
            return "-"
        return format_html('<pre class="dbqueue-traceback">{}</pre>', obj.queue_last_error)

    #: Attempts shown in the change form's history (0: none).
    dbqueue_history_rows: int = 20

    @admin.display(description=_("attempts"))
    def dbqueue_history(self, obj: Any) -> str:
        if obj is None or obj.pk is None or not self.dbqueue_history_rows or not history_enabled(self.model):
            return "-"
        attempts = list(
            QueueAttempt.objects.using(obj._state.db)
            .filter(model=self.opts.label, object_id=str(obj.pk))
            .order_by("-finished_at", "-pk")[: self.dbqueue_history_rows]
        )
        if not attempts:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    a.attempt,
                    a.get_outcome_display(),
                    a.worker_id,
                    date_format(timezone.localtime(a.claimed_at), "DATETIME_FORMAT") if a.claimed_at else "-",
                    date_format(timezone.localtime(a.finished_at), "DATETIME_FORMAT"),
                    error_summary(a.error, 200),
                )
                for a in attempts
            ),
        )
        head = format_html(
            "<tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>",
            _("attempt"),
            _("outcome"),
            _("worker"),
            _("claimed"),
            _("finished"),
            _("error"),
        )
        return format_html('<table class="dbqueue-history">{}{}</table>', head, rows)

    # -- permissions ---------------------------------------------------------------------

    def has_dbqueue_permission(self, request: HttpRequest) -> bool:
        """May the user moderate the queue (actions, taking items)? The change permission by
        default; override to require a permission of your own (e.g. ``shop.manage_queue``)."""
        return self.has_change_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        if request.method == "POST" and "action" in request.POST:
            wanted = set(request.POST.getlist("action")) & set(self.dbqueue_actions)
            if wanted - set(self.get_actions(request)):
                raise PermissionDenied  # a forged POST for an action the user may not run
        context = {"dbqueue": self.dbqueue_changelist_context(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def dbqueue_changelist_context(self, request: HttpRequest) -> dict[str, Any]:
        context: dict[str, Any] = {
            "dashboard_url": self._dbqueue_url("dashboard"),
            "can_take": self.has_dbqueue_permission(request),
            "take_max": self.dbqueue_take_max,
            "take_default": self.dbqueue_take_default,
        }
        if context["can_take"]:
            query = request.GET.urlencode()
            context["take_url"] = self._dbqueue_url("take") + (f"?{query}" if query else "")
            context["mine_url"] = self._dbqueue_url("mine")
            context["my_count"] = self.dbqueue_my_items(request).count()
        return context

    # -- dashboard -----------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}_dbqueue"
        wrap = self.admin_site.admin_view
        return [
            path("dbqueue/dashboard/", wrap(self.dbqueue_dashboard_view), name=f"{prefix}_dashboard"),
            *self.dbqueue_people_urls(),
            *super().get_urls(),
        ]

    def dbqueue_dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": _("%(name)s queue") % {"name": self.opts.verbose_name_plural.capitalize()},
            "opts": self.opts,
            "stats": queue_stats(self.model),
            "dbqueue": self.dbqueue_changelist_context(request),
        }
        return TemplateResponse(request, self.dbqueue_dashboard_template, context)
