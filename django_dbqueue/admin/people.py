"""People as consumers: staff users take queue items in the admin, like a worker does.

"Take the next N" runs the very claim ``runqueue`` workers run (``SELECT … FOR UPDATE SKIP
LOCKED`` + one UPDATE), narrowed by the changelist's current filters, and leases the rows to
``user:<username>`` for ``dbqueue_take_lease`` seconds. People and workers therefore share one
queue safely: a row is held by one of them at a time, and a claim a person forgets comes back
by itself when its lease runs out (the workers' rescue).

A later request acts on a row through its pk and claim token (carried by the "my items"
form): :meth:`~django_dbqueue.query.QueueQuerySetMixin.adopt` loads the row only while that
claim still holds, so an outcome after the lease ran out is refused, never written.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import router
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from ..exceptions import Discard, LeaseLost
from ..query import QueueQuerySet
from ..states import QueueState


class MarkedFailed(Discard):
    """A person marked the item failed: it ends FAILED with their note, no retry."""


class TakeForm(forms.Form):
    n = forms.IntegerField(min_value=1)


class OutcomeForm(forms.Form):
    OUTCOMES = (
        ("done", _("Done")),
        ("failed", _("Failed")),
        ("defer", _("Defer")),
        ("release", _("Hand back")),
    )
    pk = forms.CharField()
    token = forms.IntegerField()
    outcome = forms.ChoiceField(choices=OUTCOMES)
    note = forms.CharField(required=False, max_length=2000)
    defer_until = forms.DateTimeField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("outcome") == "defer" and not data.get("defer_until"):
            raise forms.ValidationError(_("Deferring needs a date."))
        return data


class PeopleAdminMixin:
    """The "take / my items" views of :class:`~django_dbqueue.admin.QueueAdminMixin`."""

    #: Seconds a person holds taken items before they go back to the queue.
    dbqueue_take_lease: float = 3600
    #: Largest N of "take the next N", and the number the form suggests.
    dbqueue_take_max: int = 100
    dbqueue_take_default: int = 5
    dbqueue_mine_template = "admin/django_dbqueue/my_items.html"

    def dbqueue_worker_id(self, request: HttpRequest) -> str:
        return f"user:{request.user.get_username()}"

    def has_dbqueue_take_permission(self, request: HttpRequest) -> bool:
        return self.has_dbqueue_permission(request)

    def dbqueue_people_urls(self) -> list[Any]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}_dbqueue"
        wrap = self.admin_site.admin_view
        return [
            path("dbqueue/take/", wrap(self.dbqueue_take_view), name=f"{prefix}_take"),
            path("dbqueue/mine/", wrap(self.dbqueue_mine_view), name=f"{prefix}_mine"),
        ]

    def dbqueue_write_queryset(self) -> QueueQuerySet:
        """All rows, on the database the model is written to (claims and outcomes must not
        go to a read replica a router may send reads to)."""
        return self.model.queue_queryset(router.db_for_write(self.model))

    def dbqueue_my_items(self, request: HttpRequest) -> QuerySet:
        return self.dbqueue_write_queryset().filter(
            queue_state=QueueState.RUNNING, queue_locked_by=self.dbqueue_worker_id(request)
        )

    def _dbqueue_url(self, name: str) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_dbqueue_{name}")

    def dbqueue_take_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_dbqueue_take_permission(request):
            raise PermissionDenied
        form = TakeForm(request.POST)
        if not form.is_valid():
            self.message_user(request, _("Say how many items to take."), messages.ERROR)
            return HttpResponseRedirect(self._dbqueue_url("mine"))
        n = min(form.cleaned_data["n"], self.dbqueue_take_max)
        # The changelist's filters (in the query string) narrow what is taken.
        changelist = self.get_changelist_instance(request)
        qs = self.dbqueue_queryset(changelist.get_queryset(request)).using(router.db_for_write(self.model))
        if qs.query.distinct:
            qs = self.dbqueue_write_queryset().filter(pk__in=qs.values("pk"))
        rows = qs.claim(n, worker_id=self.dbqueue_worker_id(request), lease=self.dbqueue_take_lease)
        if rows:
            self.message_user(
                request,
                _("You took %(n)d %(names)s; they are yours for %(minutes)d minutes.")
                % {
                    "n": len(rows),
                    "names": self.opts.verbose_name_plural,
                    "minutes": self.dbqueue_take_lease // 60,
                },
                messages.SUCCESS,
            )
        else:
            self.message_user(request, _("Nothing is ready to take right now."), messages.WARNING)
        return HttpResponseRedirect(self._dbqueue_url("mine"))

    def dbqueue_mine_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_dbqueue_take_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            form = OutcomeForm(request.POST)
            if form.is_valid():
                self.dbqueue_record_outcome(request, form.cleaned_data)
            else:
                self.message_user(request, _("Not recorded: %s") % form.errors.as_text(), messages.ERROR)
            return HttpResponseRedirect(request.path)
        items = list(self.dbqueue_my_items(request).order_by("queue_locked_until", "pk"))
        for item in items:
            item.dbqueue_change_url = reverse(
                f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change", args=[item.pk]
            )
        context = {
            **self.admin_site.each_context(request),
            "title": _("My %(names)s") % {"names": self.opts.verbose_name_plural},
            "opts": self.opts,
            "items": items,
            "take_url": self._dbqueue_url("take"),
            "take_default": self.dbqueue_take_default,
            "take_max": self.dbqueue_take_max,
            "outcomes": OutcomeForm.OUTCOMES,
        }
        return TemplateResponse(request, self.dbqueue_mine_template, context)

    def dbqueue_record_outcome(self, request: HttpRequest, data: dict[str, Any]) -> bool:
        """Record a person's outcome on an item they hold; False (and a message) if the
        claim is gone (lease ran out, or the row is not theirs)."""
        me = self.dbqueue_worker_id(request)
        qs = self.dbqueue_write_queryset()
        row = qs.filter(queue_locked_by=me).adopt(data["pk"], data["token"], worker_id=me)
        outcome = data["outcome"]
        try:
            if row is None:
                raise LeaseLost
            if outcome == "done":
                row.mark_succeeded()
            elif outcome == "failed":
                note = data.get("note") or "marked failed"
                row.mark_failed(MarkedFailed(f"{note} ({me})"))
            elif outcome == "release":
                row.release()
            elif not self._dbqueue_defer(row.pk, data["token"], data["defer_until"]):
                raise LeaseLost
        except LeaseLost:
            self.message_user(
                request,
                _("Item %(pk)s is no longer yours (its lease ran out or it was taken back): not recorded.")
                % {"pk": data["pk"]},
                messages.ERROR,
            )
            return False
        self.message_user(
            request,
            _("%(item)s: %(outcome)s.") % {"item": row, "outcome": dict(OutcomeForm.OUTCOMES)[outcome]},
        )
        return True

    def _dbqueue_defer(self, pk: Any, token: int, until: Any) -> bool:
        """Give the row back due at ``until``, this attempt not counted: one UPDATE fenced
        by the claim token, so a row whose claim is gone is left alone."""
        if isinstance(until, timedelta):
            raise TypeError("defer_until must be a datetime")
        return (
            self.dbqueue_write_queryset()
            .filter(pk=pk, queue_token=token, queue_state=QueueState.RUNNING)
            .update(
                queue_state=QueueState.READY,
                queue_run_at=until,
                queue_attempts=F("queue_attempts") - 1,
                queue_token=None,
                queue_locked_by=None,
                queue_locked_until=None,
            )
            == 1
        )
