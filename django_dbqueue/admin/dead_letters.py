"""The dead-letter console of :class:`~django_dbqueue.admin.QueueAdminMixin` (issue #37).

One page per queue model lists its FAILED rows by error group: the last line of the stored
traceback with its variable parts masked (``tracebacks.error_group``, the grouping Spark's
report does), computed by the database where it has regular expressions (MySQL, MariaDB,
PostgreSQL; in Python over at most ``dbqueue_dead_letter_scan`` rows on SQLite).

"Replay these" makes one group's rows due again: ONE UPDATE (``retry_now()``: READY, a fresh
attempt budget), confirmed by the exact number of rows the page showed. The statement runs in
a transaction that is rolled back when it changed another number (rows failed or were replayed
meanwhile): nothing is replayed and the page shows the new count. A replayed row is the same
row: its attempt history (``QueueAttempt`` rows of its primary key) stays, and its next
attempts follow it there. Viewing needs the view permission, replaying the change permission.

The page takes the changelist's query string (its link on the changelist carries it): the
groups, their counts and a replay are then those of the FAILED rows among the rows the
changelist shows — a day's failures, one customer's, a priority range — and the replay's one
UPDATE holds the filters' conditions too. A filter that cannot be applied shows its error and
replays nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models, router, transaction
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from ..backends import backend_for
from ..states import QueueState
from ..tracebacks import ERROR_LINE_LENGTH, error_group
from .base import QueueAdminBase
from .display import number, when


@dataclass(frozen=True)
class ErrorGroup:
    text: str
    count: int
    last_failed: datetime | None


class ReplayForm(forms.Form):
    group = forms.CharField(max_length=ERROR_LINE_LENGTH, required=False, strip=False)
    count = forms.IntegerField(min_value=1)


class EditedReplayForm(forms.Form):
    pk = forms.CharField(max_length=64)
    value = forms.JSONField()


class DeadLetterAdminMixin(QueueAdminBase):
    """The "Dead letters" page of :class:`~django_dbqueue.admin.QueueAdminMixin`."""

    #: Groups the page lists (the largest first).
    dbqueue_dead_letter_groups: int = 50
    #: SQLite only (no regular expressions): the failed rows read to group them in Python.
    dbqueue_dead_letter_scan: int = 10_000
    dbqueue_dead_letter_template = "admin/django_dbqueue/dead_letters.html"
    #: What a failed row was enqueued with (a message's ``payload``, a task's ``arguments``):
    #: the console then offers to replay one row with it edited as JSON, checked by
    #: :meth:`dbqueue_replay_changes` as its enqueuing call checks it. None: no such form.
    dbqueue_replay_field: str | None = None

    def dbqueue_check_replay(self, row: Any, value: Any) -> None:
        """Raise ``ValueError``/``TypeError`` if ``value`` may not replace the row's
        ``dbqueue_replay_field`` (an admin that declares the field says how)."""
        raise ValueError("this model declares no check of an edited replay")

    def dbqueue_replay_changes(self, row: Any, value: Any) -> dict[str, Any]:
        """The columns an edited replay writes, from the JSON ``value`` the person gave:
        by default ``dbqueue_replay_field`` itself, after :meth:`dbqueue_check_replay`. An
        admin whose enqueued call spans several columns (a task's ``args`` and ``kwargs``)
        overrides this to check and split the value; ``ValueError``/``TypeError`` refuses it."""
        assert self.dbqueue_replay_field is not None
        self.dbqueue_check_replay(row, value)
        return {self.dbqueue_replay_field: value}

    def has_dbqueue_replay_permission(self, request: HttpRequest) -> bool:
        """Replaying changes rows: the model's change permission."""
        return self.has_change_permission(request)

    def dbqueue_dead_letter_urls(self) -> list[Any]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_dbqueue_dead_letters"
        return [
            path(
                "dbqueue/dead-letters/", self.admin_site.admin_view(self.dbqueue_dead_letters_view), name=name
            )
        ]

    def dbqueue_failed(self, request: HttpRequest | None = None) -> tuple[models.QuerySet, list[str]]:
        """The FAILED rows, on the database the model is written to (a replay writes), and
        the errors of the changelist filters in the request's query string: with filters,
        the FAILED rows among those the changelist shows (:meth:`dbqueue_filtered_rows`),
        none when a filter could not be applied."""
        rows: models.QuerySet = self.dbqueue_write_queryset()
        errors: list[str] = []
        if request is not None and request.GET:
            rows, errors = self.dbqueue_filtered_rows(request)
            if errors:
                rows = rows.none()
        return rows.filter(queue_state=QueueState.FAILED), errors

    def dbqueue_error_groups(self, failed: models.QuerySet) -> list[ErrorGroup]:
        """The error groups of ``failed`` (:meth:`dbqueue_failed`), the largest first."""
        expression = backend_for(failed.db).error_group("queue_last_error")
        if expression is None:
            return self._groups_in_python(failed)
        rows = (
            failed.order_by()
            .annotate(dbqueue_group=expression)
            .values("dbqueue_group")
            .annotate(n=Count("pk"), last=Max("queue_finished_at"))
            .order_by("-n", "dbqueue_group")
        )
        return [
            ErrorGroup(r["dbqueue_group"] or "", r["n"], r["last"])
            for r in rows[: self.dbqueue_dead_letter_groups]
        ]

    def _groups_in_python(self, failed: models.QuerySet) -> list[ErrorGroup]:
        counts: Counter[str] = Counter()
        last: dict[str, Any] = {}
        for text, finished in failed.order_by().values_list("queue_last_error", "queue_finished_at")[
            : self.dbqueue_dead_letter_scan
        ]:
            group = error_group(text or "")
            counts[group] += 1
            if finished is not None and (last.get(group) is None or finished > last[group]):
                last[group] = finished
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return [ErrorGroup(g, n, last.get(g)) for g, n in ranked[: self.dbqueue_dead_letter_groups]]

    def dbqueue_group_rows(self, failed: models.QuerySet, group: str) -> models.QuerySet:
        """The rows of ``failed`` in one error group: a condition of the UPDATE itself (in
        SQL), or their primary keys where the database cannot mask (SQLite)."""
        expression = backend_for(failed.db).error_group("queue_last_error")
        if expression is not None:
            return failed.alias(dbqueue_group=expression).filter(dbqueue_group=group)
        texts = failed.order_by().values_list("pk", "queue_last_error")[: self.dbqueue_dead_letter_scan]
        return failed.filter(pk__in=[pk for pk, text in texts if error_group(text or "") == group])

    def dbqueue_dead_letters_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_dbqueue_replay_permission(request):
                raise PermissionDenied
            if "value" in request.POST and self.dbqueue_replay_field:
                self.dbqueue_replay_edited(request, EditedReplayForm(request.POST))
            else:
                self.dbqueue_replay(request, ReplayForm(request.POST))
            return HttpResponseRedirect(request.get_full_path())
        failed, filter_errors = self.dbqueue_failed(request)
        groups = self.dbqueue_error_groups(failed)
        query = request.GET.urlencode()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Dead letters: failed %(names)s by error") % {"names": self.opts.verbose_name_plural},
            "groups": [(g, number(g.count), when(g.last_failed)) for g in groups],
            "can_replay": self.has_dbqueue_replay_permission(request),
            "replay_field": self.dbqueue_replay_field,
            "database": router.db_for_write(self.model),
            "filtered": bool(query),
            "all_url": request.path,
            "filter_errors": filter_errors,
            "changelist_url": self._dbqueue_changelist_url() + (f"?{query}" if query else ""),
        }
        return TemplateResponse(request, self.dbqueue_dead_letter_template, context)

    def dbqueue_replay(self, request: HttpRequest, form: ReplayForm) -> int:
        """Replay one group in one UPDATE, if it still holds the confirmed number of rows."""
        if not form.is_valid():
            self.message_user(
                request, _("Nothing was replayed: say which group and how many rows."), messages.ERROR
            )
            return 0
        failed, errors = self.dbqueue_failed(request)
        if errors:
            self.message_user(request, " ".join([*errors, str(_("Nothing was replayed."))]), messages.ERROR)
            return 0
        group, confirmed = form.cleaned_data["group"], form.cleaned_data["count"]
        rows = self.dbqueue_group_rows(failed, group)
        with transaction.atomic(using=rows.db):
            replayed = rows.retry_now()  # type: ignore[attr-defined]
            if replayed != confirmed:
                transaction.set_rollback(True, using=rows.db)
        if replayed != confirmed:
            self.message_user(
                request,
                _("Nothing was replayed: the group holds %(now)s rows now, not %(shown)s. Confirm again.")
                % {"now": number(replayed), "shown": number(confirmed)},
                messages.WARNING,
            )
            return 0
        self.message_user(
            request, _("Replayed %(n)s rows: due now, with their attempt history.") % {"n": number(replayed)}
        )
        return replayed

    def _dbqueue_changelist_url(self) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_changelist")

    def dbqueue_replay_edited(self, request: HttpRequest, form: EditedReplayForm) -> bool:
        """Replay one FAILED row with its enqueued value edited: the value checked as the
        enqueuing call checks it, then written and the row made due, in one transaction."""
        field = self.dbqueue_replay_field
        failed = self.dbqueue_failed()[0]
        row = None
        if form.is_valid():
            try:
                row = failed.filter(pk=form.cleaned_data["pk"]).first()
            except (ValueError, ValidationError):  # not a primary key of this model
                row = None
        if row is None:
            self.message_user(
                request, _("Nothing was replayed: name a failed row and valid JSON."), messages.ERROR
            )
            return False
        try:
            changes = self.dbqueue_replay_changes(row, form.cleaned_data["value"])
        except (TypeError, ValueError) as exc:
            self.message_user(request, _("Nothing was replayed: %s") % exc, messages.ERROR)
            return False
        rows = failed.filter(pk=row.pk)
        with transaction.atomic(using=rows.db):
            done = rows.update(**changes) and rows.retry_now()  # type: ignore[attr-defined]
        if not done:
            self.message_user(
                request, _("Nothing was replayed: the row is no longer failed."), messages.WARNING
            )
            return False
        self.message_user(
            request, _("Replayed %(row)s with the edited %(field)s.") % {"row": row, "field": field}
        )
        return True
