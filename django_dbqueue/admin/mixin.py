"""``QueueAdminMixin``: moderate a queue model in the Django admin.

``class OrderAdmin(QueueAdminMixin, admin.ModelAdmin)`` adds, beside the model's own
``list_display``, ``list_filter``, ``search_fields`` and actions:

* queue columns (a readable state, priority, run at, attempts, the last error's summary);
* queue filters (state, has error, date ranges where a date alone means the whole day,
  priority and attempt ranges); an invalid filter is named at the top of the list and turns
  the bulk actions off (:mod:`.filters`);
* bulk actions that are each ONE UPDATE or DELETE over the selection or the whole filtered
  set, never touching a RUNNING row, confirming the exact number of rows first when they act
  on all matching rows (:mod:`.actions`);
* a page query that stays on the queue table whatever ``list_select_related`` says
  (:mod:`.changelist`) and a paginator that never runs a full ``COUNT(*)`` and marks its
  estimates (:mod:`.pagination`);
* read-only queue columns in the change form, with the full traceback, the attempt history and
  Retry now / Reschedule / Cancel buttons for the row (:mod:`.rows`);
* a dashboard per model (:mod:`.stats`), and "people as consumers": take the next N items,
  "my items", done / failed / defer / hand back, one at a time or all at once (:mod:`.people`);
* a dead-letter console: failed rows by masked error, "replay these" per group in one UPDATE
  confirmed by its exact count (:mod:`.dead_letters`).

Everything is configured by ``dbqueue_*`` class attributes; see docs/admin.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import PermissionDenied
from django.db import models, router
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.translation import gettext_lazy as _
from rangefilter.filters import NumericRangeFilter

from ..queue.history import history_enabled
from .actions import ActionsAdminMixin
from .cancel import CancelAdminMixin
from .changelist import QueueChangeList
from .charts import charts
from .dead_letters import DeadLetterAdminMixin
from .display import describe_queue_state, error_summary, number
from .filters import HasErrorFilter, QueueStateFilter, WholeDayRangeFilter, collapsed
from .keyset import KEY_VAR
from .pagination import EstimatedCountPaginator, count_hint, count_text, results_text
from .pausing import PauseAdminMixin
from .people import PeopleAdminMixin
from .rows import RowAdminMixin
from .stats import queue_stats
from .timeline import SPANS
from .unique import UniqueKeyAdminMixin
from .workflow import attach_progress, is_workflow, progress_cell

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

__all__ = ["HasErrorFilter", "QueueAdminMixin", "describe_queue_state", "error_summary"]

#: The request attribute that keeps the changelist the request built.
CHANGELIST_ATTRIBUTE = "dbqueue_changelist"


class QueueAdminMixin(
    UniqueKeyAdminMixin,
    CancelAdminMixin,
    ActionsAdminMixin,
    PeopleAdminMixin,
    RowAdminMixin,
    PauseAdminMixin,
    DeadLetterAdminMixin,
):
    """Mix into a ``ModelAdmin`` of a ``QueueMixin`` model (before ``admin.ModelAdmin``)."""

    #: Columns added after the model admin's own ``list_display``.
    dbqueue_list_display: tuple[str, ...] = (
        "dbqueue_state",
        "queue_priority",
        "dbqueue_run_at",
        "queue_attempts",
        "dbqueue_error",
    )
    #: Filters added after the model admin's own ``list_filter``: the everyday ones first and open,
    #: then the rarely needed ones, drawn closed until used (a sidebar of ~1.4 screens, not 2.5).
    dbqueue_list_filter: tuple[Any, ...] = (
        QueueStateFilter,
        HasErrorFilter,
        ("queue_run_at", WholeDayRangeFilter),
        ("queue_enqueued_at", WholeDayRangeFilter),
        ("queue_last_attempt_at", collapsed(WholeDayRangeFilter)),
        ("queue_finished_at", collapsed(WholeDayRangeFilter)),
        ("queue_priority", collapsed(NumericRangeFilter)),
        ("queue_attempts", collapsed(NumericRangeFilter)),
    )
    #: Actions added after the model admin's own ``actions``.
    dbqueue_actions: tuple[str, ...] = (
        "dbqueue_retry_now",
        "dbqueue_reprioritize",
        "dbqueue_reschedule",
        "dbqueue_cancel",
        "dbqueue_cancel_running",
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
    change_list_template = "admin/django_dbqueue/queue_change_list.html"
    dbqueue_dashboard_template = "admin/django_dbqueue/dashboard.html"

    def __init__(self, model: type[models.Model], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        if self.actions is not None:
            own = list(self.actions)
            self.actions = [*own, *(name for name in self.dbqueue_actions if name not in own)]

    # -- composition with the model's own admin ----------------------------------------------

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        own = list(super().get_list_display(request))
        ours = list(self.dbqueue_list_display)
        if is_workflow(self.model) and "dbqueue_state" in ours:
            # A workflow's progress (wf.progress()) beside its state, as of the page's load.
            ours.insert(ours.index("dbqueue_state") + 1, "dbqueue_progress")
        return [*own, *(c for c in ours if c not in own)]

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        own = [QueueStateFilter if f == "queue_state" else f for f in super().get_list_filter(request)]
        return [*own, *(f for f in self.dbqueue_list_filter if f not in own)]

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 shows actions on the change form too and says where with ``action_location``
        # (an ``admin.ActionLocation``); an override without that parameter is deprecated there
        # and switches the change form's actions off. 5.2 and 6.0 have no such parameter: pass it
        # on only when Django gave one.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)
        if self.dbqueue_replace_delete_selected and "dbqueue_delete" in actions:
            actions.pop("delete_selected", None)
        return actions

    # -- columns -------------------------------------------------------------------------

    @admin.display(description=_("queue state"), ordering="queue_state")
    def dbqueue_state(self, obj: Any) -> str:
        return describe_queue_state(obj)

    @admin.display(description=_("progress"))
    def dbqueue_progress(self, obj: Any) -> str:
        return progress_cell(obj)

    @admin.display(description=_("last error"))
    def dbqueue_error(self, obj: Any) -> str:
        # Shorter than the change form's summary: the column shares 1,400 px with the others
        # (its cell wraps anywhere, style.html); the whole text is on the row's page.
        return error_summary(obj.queue_last_error, 80)

    # -- permissions ---------------------------------------------------------------------

    def has_dbqueue_permission(self, request: HttpRequest) -> bool:
        """May the user moderate the queue (actions, taking items)? The change permission by
        default; override to require a permission of your own (e.g. ``shop.manage_queue``)."""
        return self.has_change_permission(request)

    # -- the list ------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[QueueChangeList]:
        return QueueChangeList

    def get_paginator(
        self, request: HttpRequest, queryset: Any, per_page: int, *args: Any, **kwargs: Any
    ) -> Any:
        paginator = super().get_paginator(request, queryset, per_page, *args, **kwargs)
        if isinstance(paginator, EstimatedCountPaginator):  # a page link's cursor (admin/keyset.py)
            paginator.cursor = request.GET.get(KEY_VAR)
        return paginator

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        setattr(request, CHANGELIST_ATTRIBUTE, changelist)  # for response_action() and the take view
        if "dbqueue_progress" in changelist.list_display:
            attach_progress(list(changelist.result_list))
        return changelist

    def dbqueue_filter_errors(self, request: HttpRequest) -> list[str]:
        changelist = getattr(request, CHANGELIST_ATTRIBUTE, None)
        return changelist.dbqueue_filter_errors if isinstance(changelist, QueueChangeList) else []

    def response_action(
        self, request: HttpRequest, queryset: models.QuerySet, *args: Any, **kwargs: Any
    ) -> Any:
        # Django 6.1's ``action_location``, passed on as given (5.2 and 6.0 have none).
        errors = self.dbqueue_filter_errors(request)
        if errors:  # an invalid filter was not applied: the set is not what the person sees
            self.message_user(request, " ".join([*errors, str(_("No action was run."))]), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        if request.method == "POST" and "action" in request.POST:
            wanted = set(request.POST.getlist("action")) & set(self.dbqueue_actions)
            if wanted - set(self.get_actions(request)):
                raise PermissionDenied  # a forged POST for an action the user may not run
        context = {"dbqueue": self.dbqueue_changelist_context(request), **(extra_context or {})}
        response = super().changelist_view(request, context)
        data = getattr(response, "context_data", None) or {}
        changelist = data.get("cl")
        if isinstance(changelist, QueueChangeList):
            errors = changelist.dbqueue_filter_errors
            if errors:
                data.update(dbqueue_filter_errors=errors, action_form=None)
            paginator = changelist.paginator
            if getattr(paginator, "estimated", False):
                names = cast("StrOrPromise", self.opts.verbose_name_plural)  # None only before setup
                shown = count_text(paginator, names)
                data.update(
                    dbqueue_count=shown,
                    dbqueue_results=results_text(paginator),
                    dbqueue_search_var=SEARCH_VAR,
                    dbqueue_page_range=list(paginator.get_elided_page_range(changelist.page_num))
                    if changelist.multi_page
                    else [],
                    dbqueue_select_all=_("Select all matching %(names)s (%(count)s)")
                    % {"names": names, "count": count_hint(paginator)},
                    selection_note_all=_(
                        "All matching %(names)s selected: the exact number is shown before any action runs."
                    )
                    % {"names": names},
                )
        return response

    def dbqueue_changelist_context(self, request: HttpRequest) -> dict[str, Any]:
        query = request.GET.urlencode()
        context: dict[str, Any] = {
            "dashboard_url": self._dbqueue_url("dashboard"),
            # The dead letters among the rows the changelist shows: its filters go along.
            "dead_letters_url": self._dbqueue_url("dead_letters") + (f"?{query}" if query else ""),
            "can_take": self.has_dbqueue_permission(request),
            "take_max": self.dbqueue_take_max,
            "take_default": self.dbqueue_take_default,
            **self.dbqueue_pause_context(request),
        }
        if context["can_take"]:
            context["take_url"] = self._dbqueue_url("take") + (f"?{query}" if query else "")
            context["mine_url"] = self._dbqueue_url("mine")
            mine = self.dbqueue_my_count(request)
            context["my_count"] = None if mine is None else number(mine)
        return context

    # -- dashboard -----------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}_dbqueue"
        wrap = self.admin_site.admin_view
        return [
            path("dbqueue/dashboard/", wrap(self.dbqueue_dashboard_view), name=f"{prefix}_dashboard"),
            *self.dbqueue_people_urls(),
            *self.dbqueue_row_urls(),
            *self.dbqueue_pause_urls(),
            *self.dbqueue_dead_letter_urls(),
            *super().get_urls(),
        ]

    def dbqueue_dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        names = cast("StrOrPromise", self.opts.verbose_name_plural)  # None only before setup
        context = {
            **self.admin_site.each_context(request),
            "title": _("%(name)s queue") % {"name": names.capitalize()},
            "opts": self.opts,
            "stats": queue_stats(self.model),
            "charts": self.dbqueue_charts(request),
            "dbqueue": self.dbqueue_changelist_context(request),
        }
        return TemplateResponse(request, self.dbqueue_dashboard_template, context)

    def dbqueue_charts(self, request: HttpRequest) -> dict[str, Any] | None:
        """Throughput and latency over the last hour (``?span=day``: day), from the attempt
        history; None for a model that keeps none."""
        if not history_enabled(self.model):
            return None
        span = request.GET.get("span", "hour")
        return charts(
            self.model._meta.label, router.db_for_read(self.model), span if span in SPANS else "hour"
        )
