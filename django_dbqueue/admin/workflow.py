"""A workflow row's page (docs/howto/workflows.md): its progress and step timeline, and the
"Fork from a step…" button (``fork_from()``: the checkpoints from that step on are forgotten,
the row queued again). "Resume" is the row's "Retry now": a failed workflow keeps its
checkpoints and its next run starts at the step that failed."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import models
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from ..backends import DbNow
from ..models import WorkflowProgress, WorkflowStep
from ..workflows import steps_of
from ..workflows.checkpoints import key_of
from .display import when


def is_workflow(model: type[models.Model]) -> bool:
    """Is ``model``'s handler a ``@workflow``?"""
    return bool(getattr(getattr(model, "process", None), "workflow", False))


def workflow_counts(model: type[models.Model], using: str, limit: int) -> dict[str, int]:
    """The dashboard's numbers of a workflow model: rows asleep now, rows waiting for an
    event (each count stops at ``limit`` + 1)."""
    steps = WorkflowStep.objects.using(using).filter(model=model._meta.label).order_by()
    asleep = steps.filter(kind=WorkflowStep.SLEEP, finished_at__gt=DbNow())
    waiting = steps.filter(kind=WorkflowStep.WAIT, finished_at__isnull=True)
    return {"sleeping": asleep[: limit + 1].count(), "waiting": waiting[: limit + 1].count()}


#: The attribute of a changelist row that holds its progress, read for the page in one query.
PROGRESS_ATTRIBUTE = "_dbqueue_progress"


def attach_progress(rows: list[Any]) -> None:
    """Each row's ``WorkflowProgress`` (or None) on the row, for the changelist's progress
    column: one SELECT for the page's rows (one model, one database), not one per row."""
    if not rows:
        return
    keys = [key_of(row) for row in rows]
    found = {
        p.object_pk: p
        for p in WorkflowProgress.objects.using(rows[0]._state.db).filter(
            model=keys[0]["model"], object_pk__in=[key["object_pk"] for key in keys]
        )
    }
    for row, key in zip(rows, keys, strict=True):
        setattr(row, PROGRESS_ATTRIBUTE, found.get(key["object_pk"]))


def progress_cell(obj: Any) -> str:
    """A row's progress as the changelist shows it: a bar, the percentage and the message."""
    progress = getattr(obj, PROGRESS_ATTRIBUTE, None)
    if progress is None:
        return "-"
    share = max(0, min(100, round(progress.fraction * 100)))
    return format_html(
        '<progress max="100" value="{}"></progress> {}%<br><span class="help">{}</span>',
        share,
        share,
        progress.message,
    )


def _result(step: WorkflowStep) -> str:
    if step.kind == WorkflowStep.SLEEP:
        return f"until {when(step.wake_at)}"
    if step.kind == WorkflowStep.WAIT:
        if step.timed_out:
            return f"{step.event!r}: timed out"
        if step.finished_at is None:
            return f"waits for {step.event!r}" + (f" until {when(step.wake_at)}" if step.wake_at else "")
        return f"{step.event!r}: {step.result!r:.120}"
    return f"{step.result!r:.120}"


def workflow_html(obj: Any) -> str:
    """The row's progress and its timeline: each step, sleep and wait in the order its runs
    reached them, with when it started and ended and what it returned or received."""
    if obj is None or obj.pk is None:
        return "-"
    using = obj._state.db
    progress = WorkflowProgress.objects.using(using).filter(**key_of(obj)).first()
    steps = list(steps_of(obj, using))
    if progress is None and not steps:
        return "-"
    shown = (
        format_html("<p>{}: {}</p>", f"{progress.fraction:.0%}", progress.message)
        if progress
        else format_html("")
    )
    cells = "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"
    rows = format_html_join(
        "",
        cells,
        (
            (s.position, s.name, s.get_kind_display(), when(s.started_at), when(s.finished_at), _result(s))
            for s in steps
        ),
    )
    head = format_html(
        cells.replace("td>", "th>"), "#", _("step"), _("kind"), _("started"), _("finished"), _("result")
    )
    return format_html('{}<table class="dbqueue-workflow">{}{}</table>', shown, head, rows)


class ForkForm(forms.Form):
    """Which step to fork from: one of the row's checkpoints, by position."""

    position = forms.TypedChoiceField(label=_("Run again from"), coerce=int, choices=())

    def __init__(self, *args: Any, row: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["position"]
        assert isinstance(field, forms.TypedChoiceField)
        field.choices = [(s.position, f"{s.position}. {s.name}") for s in steps_of(row, row._state.db)]
