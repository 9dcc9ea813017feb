"""The bulk actions of :class:`~django_dbqueue.admin.QueueAdminMixin`.

Each action is ONE UPDATE or DELETE (the queue QuerySet's bulk operations, or ``delete()``)
over the selection, or over the whole filtered set with "select all"; none touches a RUNNING
row: it belongs to its worker until the outcome.

"Select all" never acts on a number nobody saw: every action on all matching rows first shows
the exact number of rows its statement will change (a ``COUNT`` with the statement's own
conditions), then runs it in a transaction rolled back if the number changed differs from the
number shown by more than ``dbqueue_select_all_tolerance``; the page then shows the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db import models, router, transaction
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..queue.queryset import QueueQuerySet, QueueQuerySetMixin
from ..states import QueueState
from .base import QueueAdminBase
from .display import number
from .forms import ActionForm, ConfirmForm, PriorityForm, RescheduleForm

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

FINISHED_OR_IDLE = (QueueState.SUCCEEDED, QueueState.FAILED, QueueState.CANCELLED, QueueState.IDLE)


@dataclass(frozen=True)
class Bulk:
    """One bulk action: the rows its statement changes (the same conditions as the QuerySet
    method it calls), the statement, and its words."""

    scope: Callable[[QueueQuerySetMixin], models.QuerySet]
    run: Callable[[QueueQuerySetMixin, Any], int]
    title: Any
    intro: Any
    submit: Any
    done: Callable[[Any], StrOrPromise]
    applies: Any
    form: type[ActionForm] | None = None
    permission: str = "dbqueue"


def _delete(qs: QueueQuerySetMixin, form: Any) -> int:
    # One DELETE when nothing cascades and no delete signal listens (Django's fast delete).
    total, per_model = qs.exclude(queue_state=QueueState.RUNNING).delete()
    return per_model.get(qs.model._meta.label, total)


BULK = {
    "dbqueue_retry_now": Bulk(
        scope=lambda qs: qs.retryable(),
        run=lambda qs, form: qs.retry_now(),
        title=_("Retry now"),
        intro=_("Make the items due now (failed items start over with a fresh attempt budget)."),
        submit=_("Retry now"),
        done=lambda form: _("Made due now:"),
        applies=_("ready or failed"),
    ),
    "dbqueue_reprioritize": Bulk(
        scope=lambda qs: qs.not_running(),
        run=lambda qs, form: qs.reprioritize(form.cleaned_data["priority"]),
        title=_("Change priority"),
        intro=_("Set the priority of the items (running items keep theirs)."),
        submit=_("Set priority"),
        done=lambda form: _("Set priority %s on") % number(form.cleaned_data["priority"]),
        applies=_("idle, waiting or finished"),
        form=PriorityForm,
    ),
    "dbqueue_reschedule": Bulk(
        scope=lambda qs: qs.reschedulable(),
        run=lambda qs, form: qs.reschedule(form.target()),
        title=_("Reschedule"),
        intro=_("Move the ready items to a date, or by a delay from now."),
        submit=_("Reschedule"),
        done=lambda form: _("Rescheduled"),
        applies=_("ready"),
        form=RescheduleForm,
    ),
    "dbqueue_cancel": Bulk(
        scope=lambda qs: qs.cancellable(),
        run=lambda qs, form: qs.cancel(),
        title=_("Cancel"),
        intro=_("Cancel the items that are waiting (ready or idle)."),
        submit=_("Cancel them"),
        done=lambda form: _("Cancelled"),
        applies=_("ready or idle"),
    ),
    "dbqueue_enqueue_again": Bulk(
        scope=lambda qs: qs.filter(queue_state__in=FINISHED_OR_IDLE),
        run=lambda qs, form: qs.filter(queue_state__in=FINISHED_OR_IDLE).enqueue(),
        title=_("Enqueue again"),
        intro=_("Queue the finished, failed, cancelled and idle items again, due now."),
        submit=_("Enqueue again"),
        done=lambda form: _("Enqueued again"),
        applies=_("finished, failed, cancelled or idle"),
    ),
    "dbqueue_delete": Bulk(
        scope=lambda qs: qs.not_running(),
        run=_delete,
        title=_("Delete"),
        intro=_("Delete the items for good? Running items are kept."),
        submit=_("Yes, delete"),
        done=lambda form: _("Deleted"),
        applies=_("deletable"),
        form=ConfirmForm,
        permission="delete",
    ),
}


class SetChanged(Exception):
    """The matching set moved beyond the tolerance since the confirmation page: roll back."""

    def __init__(self, changed: int) -> None:
        super().__init__(changed)
        self.changed = changed


class ActionsAdminMixin(QueueAdminBase):
    """The actions; mixed into ``QueueAdminMixin``."""

    dbqueue_action_template = "admin/django_dbqueue/action_form.html"
    #: "Select all" runs only if the rows it changes differ from the number confirmed by at
    #: most this fraction of it (0: exactly that number).
    dbqueue_select_all_tolerance: float = 0.01

    def dbqueue_queryset(self, queryset: models.QuerySet) -> QueueQuerySetMixin:
        """The changelist's (filtered) queryset as a queue QuerySet, whatever manager the
        model has; unordered and without joins for display, so an UPDATE is a plain
        ``UPDATE … WHERE``."""
        if not isinstance(queryset, QueueQuerySetMixin):
            # QuerySet._db, the alias the queryset was given (None: the router decides), is not in the stubs.
            using = queryset._db  # type: ignore[attr-defined]
            queryset = QueueQuerySet(model=queryset.model, query=queryset.query.chain(), using=using)
        return queryset.select_related(None).prefetch_related(None).order_by()

    def dbqueue_filtered_rows(self, request: HttpRequest) -> tuple[QueueQuerySetMixin, list[str]]:
        """The rows the changelist shows for the request's query string (its filters and
        search), as a queue QuerySet on the database the model is written to, and the errors
        of filters that could not be applied: with any, the rows are not the ones the person
        sees, and a caller acts on none of them.

        A search across a many-valued relation makes Django's queryset ``DISTINCT``, which an
        UPDATE cannot carry: the rows are then named by a subquery of their primary keys."""
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return self.dbqueue_write_queryset().none(), [str(_("The filters in the address are not valid."))]
        errors = self.dbqueue_filter_errors(request)
        rows = self.dbqueue_queryset(changelist.get_queryset(request)).using(router.db_for_write(self.model))
        if rows.query.distinct:
            rows = self.dbqueue_write_queryset().filter(pk__in=rows.values("pk"))
        return rows, errors

    def _dbqueue_check(self, request: HttpRequest, permission: str = "dbqueue") -> None:
        if not getattr(self, f"has_{permission}_permission")(request):
            raise PermissionDenied

    def dbqueue_drift_allowed(self, expected: int) -> int:
        return int(expected * self.dbqueue_select_all_tolerance)

    def dbqueue_bulk(self, request: HttpRequest, queryset: models.QuerySet, name: str) -> Any:
        """Run the bulk action ``name``: its confirmation page first where it asks something
        or acts on all matching rows, then its one statement, then a report."""
        bulk = BULK[name]
        self._dbqueue_check(request, bulk.permission)
        qs = self.dbqueue_queryset(queryset)
        across = request.POST.get("select_across") == "1"
        form_class = bulk.form or (ConfirmForm if across else None)
        form = None
        if form_class is not None:
            form = form_class(request.POST if "dbqueue_apply" in request.POST else None, model=qs.model)
            if not (form.is_bound and form.is_valid()):
                return self.dbqueue_confirm_page(request, qs, bulk, form)
        if not across:
            changed = bulk.run(qs, form)
        else:
            try:
                expected = int(request.POST.get("dbqueue_expected", ""))
            except ValueError:  # no confirmed number: show it first
                return self.dbqueue_confirm_page(request, qs, bulk, (form_class or ConfirmForm)())
            try:
                with transaction.atomic(using=qs.db):
                    changed = bulk.run(qs, form)
                    if abs(changed - expected) > self.dbqueue_drift_allowed(expected):
                        raise SetChanged(changed)
            except SetChanged as moved:
                confirm = cast(forms.Form, form)  # made above: "select all" always confirms
                return self.dbqueue_confirm_page(request, qs, bulk, confirm, moved=(expected, moved.changed))
        self.dbqueue_report(request, qs, changed, bulk.done(form), bulk.applies)
        return None

    def dbqueue_confirm_page(
        self,
        request: HttpRequest,
        qs: QueueQuerySetMixin,
        bulk: Bulk,
        form: forms.Form,
        moved: tuple[int, int] | None = None,
    ) -> HttpResponse:
        """The page before a bulk action: what it asks, and the exact number of rows its
        statement will change (counted with the statement's own conditions)."""
        across = request.POST.get("select_across") == "1"
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        names = self.opts.verbose_name_plural
        will = moved[1] if moved else bulk.scope(qs).count()
        summary: StrOrPromise
        if across:
            summary = _(
                "This will change exactly %(n)s %(names)s: all those matching the current filter "
                "that are %(applies)s."
            )
        else:
            summary = _(
                "%(sel)s selected; this will change exactly %(n)s %(names)s (those that are %(applies)s)."
            )
        summary = summary % {
            "n": number(will),
            "names": names,
            "applies": bulk.applies,
            "sel": number(len(set(selected))),
        }
        warning = None
        if moved:
            warning = _(
                "Nothing was changed: the matching %(names)s changed since the last page (%(then)s then, "
                "%(now)s now). Check the new number and confirm again."
            ) % {"names": names, "then": number(moved[0]), "now": number(moved[1])}
        context = {
            **self.admin_site.each_context(request),
            "title": bulk.title,
            "intro": bulk.intro,
            "submit": bulk.submit,
            "summary": summary,
            "warning": warning,
            "expected": will if across else "",
            "form": form,
            "opts": self.opts,
            "action": request.POST.get("action", ""),
            "selected": selected,
            "select_across": "1" if across else "0",
            "media": self.media + form.media,
        }
        return TemplateResponse(request, self.dbqueue_action_template, context)

    def dbqueue_report(
        self, request: HttpRequest, qs: QueueQuerySetMixin, changed: int, done: StrOrPromise, applies_to: str
    ) -> None:
        """Tell the user what changed and what was skipped (RUNNING rows are named)."""
        names = self.opts.verbose_name_plural
        across = request.POST.get("select_across") == "1"
        selected = len(set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)))
        values = {"done": done, "n": number(changed), "sel": number(selected), "names": names}
        if across:
            text = _("%(done)s %(n)s %(names)s matching the filter.") % values
        else:
            text = _("%(done)s %(n)s of %(sel)s selected %(names)s.") % values
        skipped = 0 if across else selected - changed
        if across or skipped:
            # RUNNING rows were never changed, so counting them after the UPDATE is exact.
            running = qs.filter(queue_state=QueueState.RUNNING).count()
            parts = []
            if running:
                parts.append(
                    ngettext(
                        "%s running row was left to its worker",
                        "%s running rows were left to their workers",
                        running,
                    )
                    % number(running)
                )
            others = None if across else skipped - running
            if others:
                parts.append(
                    ngettext(
                        "%(n)s row not %(applies)s was left unchanged",
                        "%(n)s rows not %(applies)s were left unchanged",
                        others,
                    )
                    % {"n": number(others), "applies": applies_to}
                )
            if parts:
                text = f"{text} {_('Skipped')}: {'; '.join(parts)}."
            if across:
                text = f"{text} " + _("Rows not %(applies)s, if any, were left unchanged.") % {
                    "applies": applies_to
                }
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)

    @admin.action(description=_("Retry now"), permissions=["dbqueue"])
    def dbqueue_retry_now(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        return self.dbqueue_bulk(request, queryset, "dbqueue_retry_now")

    @admin.action(description=_("Change priority…"), permissions=["dbqueue"])
    def dbqueue_reprioritize(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        return self.dbqueue_bulk(request, queryset, "dbqueue_reprioritize")

    @admin.action(description=_("Reschedule…"), permissions=["dbqueue"])
    def dbqueue_reschedule(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        return self.dbqueue_bulk(request, queryset, "dbqueue_reschedule")

    @admin.action(description=_("Cancel"), permissions=["dbqueue"])
    def dbqueue_cancel(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        return self.dbqueue_bulk(request, queryset, "dbqueue_cancel")

    @admin.action(
        description=_("Enqueue again (finished, failed, cancelled or idle)"), permissions=["dbqueue"]
    )
    def dbqueue_enqueue_again(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        return self.dbqueue_bulk(request, queryset, "dbqueue_enqueue_again")

    @admin.action(description=_("Delete (skips running items)…"), permissions=["delete"])
    def dbqueue_delete(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        return self.dbqueue_bulk(request, queryset, "dbqueue_delete")
