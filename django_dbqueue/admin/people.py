"""People as consumers: staff users take queue items in the admin, like a worker does.

"Take the next N" runs the very claim ``runqueue`` workers run (``SELECT … FOR UPDATE SKIP
LOCKED`` + one UPDATE), narrowed by the changelist's current filters, and leases the rows to
``user:<username>`` for ``dbqueue_take_lease`` seconds. People and workers therefore share one
queue safely: a row is held by one of them at a time, and a claim a person forgets comes back
by itself when its lease runs out (the workers' rescue).

A later request acts on a row through its pk and claim token (carried by the "my items"
form): ``adopt()`` loads the row only while that claim still holds, so an outcome after the
lease ran out is refused, never written.

Every write of queue columns this module makes is an :class:`Outcome` handed to ``record()``
(the functions under "Writes" below), as a worker's are.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import router
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from ..exceptions import Discard, LeaseLost
from ..queue import claims
from ..queue.outcome import Outcome
from ..queue.queryset import QueueQuerySet, QueueQuerySetMixin
from ..queue.record import record
from ..states import QueueState
from .base import QueueAdminBase
from .display import number, when
from .forms import OutcomeForm, TakeForm, form_errors_text


class MarkedFailed(Discard):
    """A person marked the item failed: it ends FAILED with their note, no retry."""


# -- Writes: every queue-column write of the people views ------------------------------------


def take(qs: QueueQuerySetMixin, n: int, me: str, lease: float) -> list[Any]:
    """Claim the next ``n`` ready rows of ``qs`` for ``me`` (the workers' claim)."""
    return qs.claim(n, worker_id=me, lease=lease)


def hold(qs: QueueQuerySetMixin, pk: Any, token: int, me: str) -> Any:
    """The row ``pk`` with the claim ``token``, if ``me`` still holds it; else None."""
    return claims.adopt(qs.model, qs.db, pk, token, worker_id=me, holder=me)


def finish(row: Any, outcome: str, note: str, me: str) -> None:
    """Record ``outcome`` ("done", "failed", "release") on a held row; LeaseLost if gone."""
    if outcome == "done":
        row.mark_succeeded()
    elif outcome == "failed":
        row.mark_failed(MarkedFailed(f"{note or 'marked failed'} ({me})"))
    else:
        row.release()


def defer(row: Any, until: datetime) -> bool:
    """Give a held row back due at ``until``, this attempt not counted: one UPDATE fenced by
    its claim's token, so a row whose claim is gone is left alone."""
    return row.pk in record(type(row), row.queue_claim(), [Outcome.deferred(row, until)])


def hand_back_all(qs: QueueQuerySetMixin, held: list[tuple[Any, int]], me: str) -> int:
    """Give back every (pk, token) ``me`` holds, unprocessed: one fenced UPDATE per claim
    (the rows of one "take" share its token), the attempts not counted."""
    by_token: dict[int, list[Any]] = defaultdict(list)
    for pk, token in held:
        by_token[token].append(pk)
    released = 0
    for token, pks in by_token.items():
        for pk in pks:  # any row still held by the claim carries it
            row = hold(qs, pk, token, me)
            if row is not None:
                given_back = [Outcome.given_back(pk) for pk in pks]
                released += len(record(qs.model, row.queue_claim(), given_back).written)
                break
    return released


# -- Views ------------------------------------------------------------------------------------


class PeopleAdminMixin(QueueAdminBase):
    """The "take / my items" views of :class:`~django_dbqueue.admin.QueueAdminMixin`."""

    #: Seconds a person holds taken items before they go back to the queue.
    dbqueue_take_lease: float = 3600
    #: Largest N of "take the next N", and the number the form suggests.
    dbqueue_take_max: int = 100
    dbqueue_take_default: int = 5
    #: The list's "My items (N)" counts only while at most this many rows are RUNNING: a
    #: person's items are found by ``queue_locked_by``, which no index holds, so counting them
    #: reads every running row — 10,000 of them took 0.76 s on a 10,000,000-row table whose
    #: rows were not in memory (MariaDB). Above it the link shows no number.
    dbqueue_my_count_limit: int = 1000
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

    def dbqueue_my_count(self, request: HttpRequest) -> int | None:
        """How many items the person holds; None when too many rows are RUNNING to count
        them cheaply (the running rows are counted from the state index alone)."""
        running = self.dbqueue_write_queryset().filter(queue_state=QueueState.RUNNING).order_by()
        if running.values("pk")[: self.dbqueue_my_count_limit + 1].count() > self.dbqueue_my_count_limit:
            return None
        return self.dbqueue_my_items(request).count()

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
        qs, errors = self.dbqueue_filtered_rows(request)
        if errors:
            self.message_user(request, " ".join([*errors, str(_("Nothing was taken."))]), messages.ERROR)
            return HttpResponseRedirect(self._dbqueue_url("mine"))
        rows = take(qs, n, self.dbqueue_worker_id(request), self.dbqueue_take_lease)
        if rows:
            self.message_user(
                request,
                _("You took %(n)s %(names)s; they are yours for %(minutes)s minutes.")
                % {
                    "n": number(len(rows)),
                    "names": self.opts.verbose_name_plural,
                    "minutes": number(int(self.dbqueue_take_lease // 60)),
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
            if request.POST.get("outcome") == "release_all":
                self.dbqueue_hand_back_all(request)
                return HttpResponseRedirect(request.path)
            form = OutcomeForm(request.POST, model=self.model)
            if form.is_valid():
                self.dbqueue_record_outcome(request, form.cleaned_data)
            else:
                self.message_user(request, _("Not recorded. %s") % form_errors_text(form), messages.ERROR)
            return HttpResponseRedirect(request.path)
        items = list(self.dbqueue_my_items(request).order_by("queue_locked_until", "pk"))
        for item in items:
            item.dbqueue_change_url = reverse(
                f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change", args=[item.pk]
            )
            item.dbqueue_until = when(item.queue_locked_until)
        context = {
            **self.admin_site.each_context(request),
            "title": _("My %(names)s") % {"names": self.opts.verbose_name_plural},
            "opts": self.opts,
            "items": items,
            "count": number(len(items)),
            "take_url": self._dbqueue_url("take"),
            "take_default": self.dbqueue_take_default,
            "take_max": self.dbqueue_take_max,
            "outcomes": [(value, label) for value, (label, _done) in OutcomeForm.OUTCOMES.items()],
        }
        return TemplateResponse(request, self.dbqueue_mine_template, context)

    def dbqueue_hand_back_all(self, request: HttpRequest) -> int:
        me = self.dbqueue_worker_id(request)
        held = list(self.dbqueue_my_items(request).values_list("pk", "queue_token"))
        released = hand_back_all(self.dbqueue_write_queryset(), held, me)
        self.message_user(
            request,
            _("Handed back %(n)s %(names)s to the queue.")
            % {"n": number(released), "names": self.opts.verbose_name_plural},
            messages.SUCCESS if released else messages.WARNING,
        )
        return released

    def dbqueue_record_outcome(self, request: HttpRequest, data: dict[str, Any]) -> bool:
        """Record a person's outcome on an item they hold; False (and a message) if the
        claim is gone (lease ran out, or the row is not theirs)."""
        me = self.dbqueue_worker_id(request)
        qs = self.dbqueue_write_queryset()
        row = hold(qs, data["pk"], data["token"], me)
        outcome = data["outcome"]
        try:
            if row is None:
                raise LeaseLost
            if outcome == "defer":
                if not defer(row, data["defer_until"]):
                    raise LeaseLost
            else:
                finish(row, outcome, data.get("note") or "", me)
        except LeaseLost:
            self.message_user(
                request,
                _("Item %(pk)s is no longer yours (its lease ran out or it was taken back): not recorded.")
                % {"pk": data["pk"]},
                messages.ERROR,
            )
            return False
        done = OutcomeForm.OUTCOMES[outcome][1]
        self.message_user(request, done % {"item": row, "until": when(data.get("defer_until"))})
        return True
