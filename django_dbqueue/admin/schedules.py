"""The admin of schedules: when they fire next, what they fired, enable/disable, "Run now".

An edit of a code-declared schedule's ``enabled``, ``cron``, ``every`` or ``timezone`` is an
override that later deploys keep ("Revert to code" drops it); what it runs stays the code's.
A new timing starts at its first slot after the edit. "Run now" enqueues one extra job now,
recorded in the ledger as a manual firing; the regular slots are unchanged.

What a schedule runs is chosen from code's allowlist (``targets.allowed()``), never typed: the
target field offers those targets only. Saving, enabling or running a schedule enqueues rows
of its target's model (``TaskRecord``, ``Message`` or the queue model), so it needs the
user's add permission on that model as well as the Schedule permission.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db import DEFAULT_DB_ALIAS, router
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..models import Schedule, ScheduleFiring
from ..schedules import InvalidSchedule, Timing, fire_now, targets
from ..schedules.syncing import edited, revert_to_code
from ..tables.schedule import OVERRIDABLE
from .display import error_summary, when


def _using(obj: Schedule | None = None) -> str:
    return (obj and obj._state.db) or router.db_for_write(Schedule) or DEFAULT_DB_ALIAS


def refusal(user: Any, target: str) -> str | None:
    """Why ``user`` may not have a schedule enqueue ``target``'s jobs (None: they may)."""
    try:
        model = targets.enqueued_model(target)
    except InvalidSchedule as exc:
        return str(exc)
    opts = model._meta
    if user is None or not user.has_perm(f"{opts.app_label}.{get_permission_codename('add', opts)}"):
        return f"you may not add {opts.verbose_name_plural}, which this schedule enqueues"
    return None


class ScheduleForm(forms.ModelForm):
    #: The user the admin builds the form for (set on the class ModelAdmin.get_form makes).
    dbqueue_user: Any = None

    class Meta:
        model = Schedule
        fields = (
            "name", "cron", "every", "timezone", "catch_up", "catch_up_limit", "enabled",
            "target", "arguments", "priority",
        )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "target" in self.fields:  # a choice among code's targets, never a typed path
            choices = sorted(targets.allowed())
            field = forms.ChoiceField(choices=[("", "---------"), *((t, t) for t in choices)])
            field.help_text = _("Targets of the schedules declared in code and of DBQUEUE_SCHEDULE_TARGETS.")
            self.fields["target"] = field

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        get = lambda name: data.get(name, getattr(self.instance, name))  # noqa: E731 - read-only fields
        try:
            Timing(cron=get("cron") or "", every=get("every"), timezone=get("timezone"))
        except InvalidSchedule as exc:
            raise forms.ValidationError(str(exc)) from None
        target = get("target")
        if not target:
            return data  # the field's own "required" error says it
        try:
            targets.resolve(target, get("arguments") or {}, _using(self.instance))
            problem = refusal(self.dbqueue_user, target)
            if problem:
                raise InvalidSchedule(problem)
        except InvalidSchedule as exc:
            if "target" not in self.fields:
                raise forms.ValidationError(str(exc)) from None
            self.add_error("target", str(exc))
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("name", "timing", "enabled", "catch_up", "due", "fired", "target", "origin", "error")
    list_filter = ("enabled", "in_code")
    search_fields = ("name", "target")
    readonly_fields = ("in_code", "overrides", "declared", "next_due", "last_slot", "last_error")
    actions = ("enable", "disable", "run_now", "revert")

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)  # a new class on every call
        form.dbqueue_user = request.user  # type: ignore[attr-defined] # a ScheduleForm subclass
        return form

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.in_code:  # code owns what it runs; the admin overrides when
            fields += [f.name for f in Schedule._meta.fields if f.editable and f.name not in OVERRIDABLE]
        return fields

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        edited(obj, list(form.changed_data) if change else [], _using(obj))

    @admin.display(description=_("timing"))
    def timing(self, obj: Schedule) -> str:
        return f"every {obj.every} s" if obj.every else f"{obj.cron} ({obj.timezone})"

    @admin.display(description=_("next due"), ordering="next_due")
    def due(self, obj: Schedule) -> str:
        return when(obj.next_due) if obj.enabled else "-"

    @admin.display(description=_("last fired slot"), ordering="last_slot")
    def fired(self, obj: Schedule) -> str:
        return when(obj.last_slot)

    @admin.display(description=_("declared"))
    def origin(self, obj: Schedule) -> str:
        if not obj.in_code:
            return "admin"
        return f"code, overridden: {', '.join(obj.overrides)}" if obj.overrides else "code"

    @admin.display(description=_("last error"))
    def error(self, obj: Schedule) -> str:
        return error_summary(obj.last_error)

    def _refused(self, request: HttpRequest, row: Schedule) -> bool:
        problem = refusal(request.user, row.target)
        if problem:
            self.message_user(request, f"{row.name}: not changed: {problem}.", messages.ERROR)
        return problem is not None

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool) -> None:
        rows = [row for row in queryset if row.enabled != enabled]
        if enabled:  # an enabled schedule enqueues its target's rows: the user must be allowed to
            rows = [row for row in rows if not self._refused(request, row)]
        for row in rows:
            row.enabled = enabled
            row.save(update_fields=["enabled", "updated_at"])
            edited(row, ["enabled"], _using(row))
        self.message_user(request, f"{len(rows)} schedule(s) {'enabled' if enabled else 'disabled'}.")

    @admin.action(description=_("Enable selected schedules"), permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description=_("Disable selected schedules"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    @admin.action(description=_("Run selected schedules now (one extra firing each)"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        who = f"admin:{request.user.get_username()}" if request.user.is_authenticated else "admin"
        for row in queryset:
            if self._refused(request, row):
                continue
            try:
                firing = fire_now(row, fired_by=who)
            except InvalidSchedule as exc:
                self.message_user(request, f"{row.name}: not fired: {exc}", messages.ERROR)
                continue
            self.message_user(request, f"{row.name}: fired now, job {firing.job}.")

    @admin.action(
        description=_("Revert selected schedules to their code declaration"), permissions=["change"]
    )
    def revert(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        done = sum(revert_to_code(row, _using(row)) for row in queryset)
        self.message_user(request, f"{done} schedule(s) follow their code declaration again.")


@admin.register(ScheduleFiring)
class ScheduleFiringAdmin(admin.ModelAdmin):
    """The ledger: read-only (a firing row is what keeps its slot from firing twice)."""

    list_display = ("schedule", "slot_time", "manual", "fired", "fired_by", "job")
    list_filter = ("manual",)
    search_fields = ("=schedule__name", "=job")
    list_select_related = ("schedule",)

    slot_time = admin.display(description=_("slot"), ordering="slot")(lambda self, obj: when(obj.slot))
    fired = admin.display(description=_("fired at"), ordering="fired_at")(
        lambda self, obj: when(obj.fired_at)
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
