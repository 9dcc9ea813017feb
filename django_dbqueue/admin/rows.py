"""One row's page: its queue columns (read-only, times to the second, the whole traceback,
the attempt history) and Retry now / Reschedule / Cancel buttons for that row.

The buttons run the same QuerySet operations as the bulk actions, over one primary key: one
UPDATE each, never touching a RUNNING row (the worker holds it until its outcome); a running
row's "Cancel" asks its worker to stop it (see django_dbqueue.flow.cancellation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from ..flow import unique
from ..models import QUEUE_FIELDS
from ..queue.history import attempt_model, history_enabled
from ..states import QueueState
from ..workflows import fork_from
from .base import QueueAdminBase
from .composition import composition_html
from .display import error_summary, traceback_html, when
from .forms import RescheduleForm
from .workflow import ForkForm, is_workflow, workflow_html

#: Queue columns shown through a display method (times to the second) instead of the field.
TIMES = {
    "queue_run_at": "dbqueue_run_at",
    "queue_last_attempt_at": "dbqueue_last_attempt_at",
    "queue_locked_until": "dbqueue_locked_until",
    "queue_enqueued_at": "dbqueue_enqueued_at",
    "queue_finished_at": "dbqueue_finished_at",
    # Not a time: the state as the list shows it (the column has no choices to label it).
    "queue_state": "dbqueue_state",
}
#: Shown together as links (dbqueue_composition), not as raw columns; whether the row has an
#: error (the filter's column) says less than the error the page shows.
HIDDEN = ("queue_batch", "queue_dependants", "queue_has_error")
#: Meaningful only while a worker (or a person) holds the row.
CLAIM_FIELDS = ("queue_locked_by", "dbqueue_locked_until")
#: Row buttons: name -> (label, states the operation changes).
ROW_OPERATIONS = {
    "retry": (_("Retry now"), (QueueState.READY, QueueState.FAILED)),
    "reschedule": (_("Reschedule…"), (QueueState.READY,)),
    "cancel": (_("Cancel"), (QueueState.READY, QueueState.IDLE)),
    "cancel_running": (_("Cancel (stop its worker)"), (QueueState.RUNNING,)),
    # Workflow rows only (admin/workflow.py).
    "fork": (
        _("Fork from a step…"),
        (QueueState.READY, QueueState.FAILED, QueueState.SUCCEEDED, QueueState.CANCELLED, QueueState.IDLE),
    ),
}

FORK_INTRO = _(
    "Forget the checkpoints from this step on and queue the row again: its next run replays the "
    "earlier steps' results and runs this step and the later ones again."
)


def _time(field: str, label: Any) -> Callable[[Any, Any], str]:
    @admin.display(description=label, ordering=field)
    def column(self: Any, obj: Any) -> str:
        return when(getattr(obj, field, None))

    return column


class RowAdminMixin(QueueAdminBase):
    """The change form's queue part; mixed into ``QueueAdminMixin``."""

    change_form_template = "admin/django_dbqueue/queue_change_form.html"
    #: Attempts shown in the change form's history (0: none).
    dbqueue_history_rows: int = 20

    dbqueue_run_at = _time("queue_run_at", _("run at"))
    dbqueue_last_attempt_at = _time("queue_last_attempt_at", _("last attempt at"))
    dbqueue_locked_until = _time("queue_locked_until", _("locked until"))
    dbqueue_enqueued_at = _time("queue_enqueued_at", _("enqueued at"))
    dbqueue_finished_at = _time("queue_finished_at", _("finished at"))

    def dbqueue_queue_fields(self, obj: Any) -> list[str]:
        fields = [
            TIMES.get(f, f) for f in QUEUE_FIELDS if f not in (*HIDDEN, "queue_last_error", "queue_token")
        ]
        if obj is None or obj.queue_state != QueueState.RUNNING:
            fields = [f for f in fields if f not in CLAIM_FIELDS]
        shown = [*fields, "dbqueue_composition", "dbqueue_last_error"]
        if is_workflow(self.model):
            shown.append("dbqueue_workflow")
        return [*shown, *(["dbqueue_history"] if obj is not None else [])]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        own = list(super().get_readonly_fields(request, obj))
        queue = [f for f in QUEUE_FIELDS if f != "queue_last_error"]
        queue += [
            *TIMES.values(),
            "dbqueue_last_error",
            "dbqueue_history",
            "dbqueue_composition",
            "dbqueue_workflow",
        ]
        return [*own, *(f for f in queue if f not in own)]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fieldsets = list(super().get_fieldsets(request, obj))
        if not self.dbqueue_fieldset:
            return fieldsets
        queue = {
            *QUEUE_FIELDS,
            *TIMES.values(),
            "dbqueue_last_error",
            "dbqueue_history",
            "dbqueue_composition",
            "dbqueue_workflow",
        }
        shown: set[str] = set()
        cleaned = []
        for name, options in fieldsets:
            fields = [f for f in options.get("fields", ()) if isinstance(f, (list, tuple)) or f not in queue]
            shown.update(f for f in options.get("fields", ()) if isinstance(f, str))
            if fields:
                cleaned.append((name, {**options, "fields": fields}))
        if self.fieldsets is not None and shown & queue:
            return fieldsets  # the model admin placed the queue fields itself
        return [*cleaned, (_("Queue"), {"fields": self.dbqueue_queue_fields(obj)})]

    @admin.display(description=_("batch and dependencies"))
    def dbqueue_composition(self, obj: Any) -> str:
        return composition_html(obj)

    @admin.display(description=_("workflow"))
    def dbqueue_workflow(self, obj: Any) -> str:
        return workflow_html(obj)

    @admin.display(description=_("last error"))
    def dbqueue_last_error(self, obj: Any) -> str:
        return traceback_html(obj.queue_last_error if obj is not None else "")

    @admin.display(description=_("attempts"))
    def dbqueue_history(self, obj: Any) -> str:
        if obj is None or obj.pk is None or not self.dbqueue_history_rows or not history_enabled(self.model):
            return "-"
        attempts = list(
            attempt_model()
            ._default_manager.using(obj._state.db)
            .filter(model=self.opts.label, object_id=str(obj.pk))
            .order_by("-finished_at", "-pk")[: self.dbqueue_history_rows]
        )
        if not attempts:
            return "-"
        cells = "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"
        rows = format_html_join(
            "",
            cells,
            (
                (
                    a.attempt,
                    a.get_outcome_display(),
                    a.worker_id,
                    when(a.claimed_at),
                    when(a.finished_at),
                    error_summary(a.error, 200),
                )
                for a in attempts
            ),
        )
        head = format_html(
            cells.replace("td>", "th>"),
            _("attempt"),
            _("outcome"),
            _("worker"),
            _("claimed"),
            _("finished"),
            _("error"),
        )
        return format_html('<table class="dbqueue-history">{}{}</table>', head, rows)

    # -- the row's buttons --------------------------------------------------------------

    def dbqueue_row_urls(self) -> list[Any]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}_dbqueue"
        return [
            path(
                "<path:object_id>/dbqueue/<str:operation>/",
                self.admin_site.admin_view(self.dbqueue_row_view),
                name=f"{prefix}_row",
            )
        ]

    def dbqueue_row_buttons(self, request: HttpRequest, obj: Any) -> list[tuple[str, Any, str]]:
        """(operation, label, url) of the buttons that apply to ``obj`` in its state."""
        if obj is None or obj.pk is None or not self.has_dbqueue_permission(request):
            return []
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_dbqueue_row"
        return [
            (operation, label, reverse(name, args=[obj.pk, operation]))
            for operation, (label, states) in ROW_OPERATIONS.items()
            if obj.queue_state in states and (operation != "fork" or is_workflow(self.model))
        ]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        context["dbqueue_row_buttons"] = self.dbqueue_row_buttons(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def dbqueue_row_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if operation not in ROW_OPERATIONS:
            raise Http404
        if not self.has_dbqueue_permission(request):
            raise PermissionDenied
        if operation == "fork" and not is_workflow(self.model):
            raise Http404
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        qs = self.dbqueue_write_queryset().filter(pk=obj.pk)
        changed: int | None
        if operation == "reschedule":
            form = RescheduleForm(request.POST if "dbqueue_apply" in request.POST else None)
            if not (form.is_bound and form.is_valid()):
                intro = _("Move this ready item to a date, or by a delay from now.")
                return self.dbqueue_row_form(
                    request, obj, form, _("Reschedule %(item)s"), _("Reschedule"), intro
                )
            changed, done = qs.reschedule(form.target()), _("%(item)s is rescheduled.")
        elif operation == "fork":
            fork = ForkForm(request.POST if "dbqueue_apply" in request.POST else None, row=obj)
            if not (fork.is_bound and fork.is_valid()):
                return self.dbqueue_row_form(request, obj, fork, _("Fork %(item)s"), _("Fork"), FORK_INTRO)
            changed, done = self.dbqueue_fork_row(request, obj, fork.cleaned_data["position"])
        elif operation == "retry":
            changed, done = self.dbqueue_retry_row(request, qs), _("%(item)s is due now.")
        elif operation == "cancel_running":
            changed = qs.cancel_running(requested_by=request.user.get_username())
            done = _("Asked the worker of %(item)s to stop it: it ends cancelled at its next lease renewal.")
        else:
            changed, done = qs.cancel(), _("%(item)s is cancelled.")
        if changed:
            self.message_user(request, done % {"item": obj}, messages.SUCCESS)
        elif changed is not None:
            state = qs.values_list("queue_state", flat=True).first()
            label = QueueState(state).label.lower() if state in QueueState.values else _("gone")
            self.message_user(
                request,
                _("%(item)s was not changed: it is %(state)s now.") % {"item": obj, "state": label},
                messages.WARNING,
            )
        return HttpResponseRedirect(
            reverse(
                f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk]
            )
        )

    def dbqueue_retry_row(self, request: HttpRequest, qs: Any) -> int | None:
        """Retry now; None (the operator told why) if the row's unique key is active in
        another row (see django_dbqueue.flow.unique): the database refused, nothing changed."""
        if unique.key_field(self.model) is None:
            return int(qs.retry_now())
        try:
            with transaction.atomic(using=qs.db):
                return int(qs.retry_now())
        except IntegrityError as exc:
            self.message_user(request, _("Nothing was changed: %(error)s") % {"error": exc}, messages.ERROR)
            return None

    def dbqueue_fork_row(self, request: HttpRequest, obj: Any, position: int) -> tuple[int | None, Any]:
        """Fork the workflow row ``obj`` from the step at ``position``; None (the operator
        told why) if it is running now."""
        try:
            fork_from(obj, position, using=obj._state.db)
        except ValueError as exc:
            self.message_user(request, _("Nothing was changed: %(error)s") % {"error": exc}, messages.ERROR)
            return None, ""
        return 1, _("%(item)s runs again from step %(position)s.") % {"item": obj, "position": position}

    def dbqueue_row_form(
        self, request: HttpRequest, obj: Any, form: Any, title: Any, submit: Any, intro: Any
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": title % {"item": obj},
            "intro": intro,
            "summary": "",
            "submit": submit,
            "form": form,
            "opts": self.opts,
            "selected": [],
            "expected": "",
            "media": self.media + form.media,
        }
        return TemplateResponse(request, self.dbqueue_action_template, context)
