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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import models, router, transaction
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path
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
    #: The field holding what a failed row was enqueued with (a message's ``payload``): the
    #: console then offers to replay one row with it edited, checked by
    #: :meth:`dbqueue_check_replay` as its enqueuing call checks it. None: no such form.
    dbqueue_replay_field: str | None = None

    def dbqueue_check_replay(self, row: Any, value: Any) -> None:
        """Raise ``ValueError``/``TypeError`` if ``value`` may not replace the row's
        ``dbqueue_replay_field`` (an admin that declares the field says how)."""
        raise ValueError("this model declares no check of an edited replay")

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

    def dbqueue_failed(self) -> models.QuerySet:
        """The FAILED rows, on the database the model is written to (a replay writes)."""
        return self.dbqueue_write_queryset().filter(queue_state=QueueState.FAILED)

    def dbqueue_error_groups(self) -> list[ErrorGroup]:
        failed = self.dbqueue_failed()
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

    def dbqueue_group_rows(self, group: str) -> models.QuerySet:
        """The FAILED rows of one error group: a condition of the UPDATE itself (in SQL), or
        their primary keys where the database cannot mask (SQLite)."""
        failed = self.dbqueue_failed()
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
            return HttpResponseRedirect(request.path)
        groups = self.dbqueue_error_groups()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Dead letters: failed %(names)s by error") % {"names": self.opts.verbose_name_plural},
            "groups": [(g, number(g.count), when(g.last_failed)) for g in groups],
            "can_replay": self.has_dbqueue_replay_permission(request),
            "replay_field": self.dbqueue_replay_field,
            "database": router.db_for_write(self.model),
        }
        return TemplateResponse(request, self.dbqueue_dead_letter_template, context)

    def dbqueue_replay(self, request: HttpRequest, form: ReplayForm) -> int:
        """Replay one group in one UPDATE, if it still holds the confirmed number of rows."""
        if not form.is_valid():
            self.message_user(
                request, _("Nothing was replayed: say which group and how many rows."), messages.ERROR
            )
            return 0
        group, confirmed = form.cleaned_data["group"], form.cleaned_data["count"]
        rows = self.dbqueue_group_rows(group)
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

    def dbqueue_replay_edited(self, request: HttpRequest, form: EditedReplayForm) -> bool:
        """Replay one FAILED row with its enqueued value edited: the value checked as the
        enqueuing call checks it, then written and the row made due, in one transaction."""
        field = self.dbqueue_replay_field
        assert field is not None
        row = None
        if form.is_valid():
            row = self.dbqueue_failed().filter(pk=form.cleaned_data["pk"]).first()
        if row is None:
            self.message_user(
                request, _("Nothing was replayed: name a failed row and valid JSON."), messages.ERROR
            )
            return False
        value = form.cleaned_data["value"]
        try:
            self.dbqueue_check_replay(row, value)
        except (TypeError, ValueError) as exc:
            self.message_user(request, _("Nothing was replayed: %s") % exc, messages.ERROR)
            return False
        rows = self.dbqueue_failed().filter(pk=row.pk)
        with transaction.atomic(using=rows.db):
            done = rows.update(**{field: value}) and rows.retry_now()  # type: ignore[attr-defined]
        if not done:
            self.message_user(
                request, _("Nothing was replayed: the row is no longer failed."), messages.WARNING
            )
            return False
        self.message_user(
            request, _("Replayed %(row)s with the edited %(field)s.") % {"row": row, "field": field}
        )
        return True
