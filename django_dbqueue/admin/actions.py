"""The bulk actions of :class:`~django_dbqueue.admin.QueueAdminMixin`.

Each action is ONE UPDATE or DELETE over the changelist's selection, or over the whole
filtered set with "select all" (the queryset Django hands the action is the filtered one), and
none touches a RUNNING row: it belongs to its worker until the outcome. The actions use the
queue QuerySet's bulk operations (``retry_now()``, ``reprioritize()``, ``reschedule()``,
``cancel()``, ``enqueue()``), whatever manager the model declares.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..query import QueueQuerySet, QueueQuerySetMixin
from ..states import QueueState


class PriorityForm(forms.Form):
    priority = forms.IntegerField(
        label=_("New priority"), min_value=-(2**31), max_value=2**31 - 1, help_text=_("Higher runs first.")
    )


class RescheduleForm(forms.Form):
    UNITS = (("minutes", _("minutes")), ("hours", _("hours")), ("days", _("days")))

    run_at = forms.DateTimeField(
        label=_("Run at"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text=_("A date and time (server time zone) …"),
    )
    delay = forms.IntegerField(label=_("… or in"), required=False, min_value=0)
    unit = forms.ChoiceField(label=_("unit"), choices=UNITS, initial="minutes", required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if (data.get("run_at") is None) == (data.get("delay") is None):
            raise forms.ValidationError(_("Give either a date and time or a delay, not both."))
        return data

    def target(self) -> Any:
        """A datetime or a timedelta (the delay counts from the database's clock)."""
        if self.cleaned_data.get("run_at") is not None:
            return self.cleaned_data["run_at"]
        return timedelta(**{self.cleaned_data.get("unit") or "minutes": self.cleaned_data["delay"]})


class ConfirmForm(forms.Form):
    pass


class ActionsAdminMixin:
    """The actions; mixed into ``QueueAdminMixin``."""

    dbqueue_action_template = "admin/django_dbqueue/action_form.html"

    def dbqueue_queryset(self, queryset: models.QuerySet) -> QueueQuerySet:
        """The changelist's (filtered) queryset as a queue QuerySet, whatever manager the
        model has; unordered, so an UPDATE is a plain ``UPDATE … WHERE``."""
        if not isinstance(queryset, QueueQuerySetMixin):
            queryset = QueueQuerySet(model=queryset.model, query=queryset.query.chain(), using=queryset._db)
        return queryset.select_related(None).order_by()

    def _dbqueue_check(self, request: HttpRequest, permission: str = "dbqueue") -> None:
        if not getattr(self, f"has_{permission}_permission")(request):
            raise PermissionDenied

    def dbqueue_report(
        self, request: HttpRequest, qs: QueueQuerySet, changed: int, done: str, applies_to: str
    ) -> None:
        """Tell the user what changed and what was skipped (RUNNING rows are named)."""
        names = self.opts.verbose_name_plural
        across = request.POST.get("select_across") == "1"
        if across:
            text = _("%(done)s %(n)d %(names)s matching the filter.") % {
                "done": done,
                "n": changed,
                "names": names,
            }
        else:
            selected = len(set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)))
            text = _("%(done)s %(n)d of %(sel)d selected %(names)s.") % {
                "done": done,
                "n": changed,
                "sel": selected,
                "names": names,
            }
        skipped = None if across else selected - changed
        if across or skipped:
            # RUNNING rows were never changed, so counting them after the UPDATE is exact.
            running = qs.filter(queue_state=QueueState.RUNNING).count()
            parts = []
            if running:
                parts.append(
                    ngettext(
                        "%d running row was left to its worker",
                        "%d running rows were left to their workers",
                        running,
                    )
                    % running
                )
            others = None if across else skipped - running
            if others:
                parts.append(
                    ngettext(
                        "%(n)d row not %(applies)s was left unchanged",
                        "%(n)d rows not %(applies)s were left unchanged",
                        others,
                    )
                    % {"n": others, "applies": applies_to}
                )
            if parts:
                text = f"{text} {_('Skipped')}: {'; '.join(parts)}."
            if across:
                text = f"{text} " + _("Rows not %(applies)s, if any, were left unchanged.") % {
                    "applies": applies_to
                }
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)

    def dbqueue_form_step(
        self,
        request: HttpRequest,
        queryset: models.QuerySet,
        form_class: type[forms.Form],
        title: str,
        intro: str,
        submit: str,
    ) -> forms.Form | HttpResponse:
        """The intermediate page of an action: the bound, valid form, or the page to show."""
        form = form_class(request.POST if "dbqueue_apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            return form
        across = request.POST.get("select_across") == "1"
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "intro": intro,
            "submit": submit,
            "form": form,
            "opts": self.opts,
            "action": request.POST.get("action", ""),
            "selected": selected,
            "select_across": "1" if across else "0",
            "count": None if across else len(set(selected)),
            "media": self.media + form.media,
        }
        return TemplateResponse(request, self.dbqueue_action_template, context)

    @admin.action(description=_("Retry now"), permissions=["dbqueue"])
    def dbqueue_retry_now(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._dbqueue_check(request)
        qs = self.dbqueue_queryset(queryset)
        changed = qs.retry_now()
        self.dbqueue_report(request, qs, changed, _("Made due now:"), _("ready or failed"))

    @admin.action(description=_("Change priority…"), permissions=["dbqueue"])
    def dbqueue_reprioritize(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        self._dbqueue_check(request)
        step = self.dbqueue_form_step(
            request,
            queryset,
            PriorityForm,
            _("Change priority"),
            _("Set the priority of the selected items (running items keep theirs)."),
            _("Set priority"),
        )
        if isinstance(step, HttpResponse):
            return step
        qs = self.dbqueue_queryset(queryset)
        priority = step.cleaned_data["priority"]
        changed = qs.reprioritize(priority)
        self.dbqueue_report(
            request, qs, changed, _("Set priority %d on") % priority, _("idle, waiting or finished")
        )
        return None

    @admin.action(description=_("Reschedule…"), permissions=["dbqueue"])
    def dbqueue_reschedule(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        self._dbqueue_check(request)
        step = self.dbqueue_form_step(
            request,
            queryset,
            RescheduleForm,
            _("Reschedule"),
            _("Move the selected ready items to a date, or by a delay from now."),
            _("Reschedule"),
        )
        if isinstance(step, HttpResponse):
            return step
        qs = self.dbqueue_queryset(queryset)
        changed = qs.reschedule(step.target())
        self.dbqueue_report(request, qs, changed, _("Rescheduled"), _("ready"))
        return None

    @admin.action(description=_("Cancel"), permissions=["dbqueue"])
    def dbqueue_cancel(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._dbqueue_check(request)
        qs = self.dbqueue_queryset(queryset)
        changed = qs.cancel()
        self.dbqueue_report(request, qs, changed, _("Cancelled"), _("ready or idle"))

    @admin.action(
        description=_("Enqueue again (finished, failed, cancelled or idle)"), permissions=["dbqueue"]
    )
    def dbqueue_enqueue_again(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._dbqueue_check(request)
        qs = self.dbqueue_queryset(queryset)
        done = [QueueState.SUCCEEDED, QueueState.FAILED, QueueState.CANCELLED, QueueState.IDLE]
        changed = qs.filter(queue_state__in=done).enqueue()
        self.dbqueue_report(
            request, qs, changed, _("Enqueued again"), _("finished, failed, cancelled or idle")
        )

    @admin.action(description=_("Delete (skips running items)…"), permissions=["delete"])
    def dbqueue_delete(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        self._dbqueue_check(request, "delete")
        step = self.dbqueue_form_step(
            request,
            queryset,
            ConfirmForm,
            _("Delete"),
            _("Delete the selected items for good? Running items are kept."),
            _("Yes, delete"),
        )
        if isinstance(step, HttpResponse):
            return step
        qs = self.dbqueue_queryset(queryset)
        # One DELETE when nothing cascades and no delete signal listens (Django's fast delete).
        changed, _per_model = qs.exclude(queue_state=QueueState.RUNNING).delete()
        changed = _per_model.get(self.opts.label, changed)
        self.dbqueue_report(request, qs, changed, _("Deleted"), _("deletable"))
        return None
