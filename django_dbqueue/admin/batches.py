"""The Batch admin: progress of each batch (counters read from its row: no member is counted
when the page loads) and a Cancel action (docs/composition.md)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..models import Batch
from .display import when


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    list_display = ("__str__", "progress_bar", "succeeded", "failed", "cancelled", "total", "created")
    search_fields = ("=id", "description")
    actions = ["cancel_batches"]
    readonly_fields = (
        "description",
        "progress_bar",
        "total",
        "succeeded",
        "failed",
        "cancelled",
        "member_models",
        "callbacks",
        "created",
        "success_fired_at",
        "complete_fired_at",
        "failure_fired_at",
        "cancelled_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a batch is declared in code: with django_dbqueue.composition.batch()

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Batch) -> str:
        return when(obj.created_at)

    @admin.display(description=_("progress"))
    def progress_bar(self, obj: Batch) -> str:
        share = 100 if not obj.total else min(100, round(100 * obj.finished / obj.total))
        return format_html(
            '<progress max="100" value="{}"></progress> {} / {} finished', share, obj.finished, obj.total
        )

    def refused_models(self, request: HttpRequest, batch: Batch) -> list[str]:
        """The member models of ``batch`` the user may not change: cancelling its members
        writes to their rows, which needs the same permission their own admin asks for."""
        refused = []
        for label in batch.member_models:
            try:
                opts = apps.get_model(label)._meta
            except LookupError:
                refused.append(label)  # a model no longer installed: nothing to check it against
                continue
            if not request.user.has_perm(f"{opts.app_label}.{get_permission_codename('change', opts)}"):
                refused.append(str(opts.verbose_name_plural))
        return refused

    @admin.action(
        description=_("Cancel the members of the selected batches that have not started"),
        permissions=["change"],
    )
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        cancelled, refusals = 0, 0
        for batch in queryset:
            refused = self.refused_models(request, batch)
            if refused:  # the whole batch or none of it: a half-cancelled batch helps no one
                self.message_user(
                    request,
                    _("%(batch)s: not cancelled: you may not change %(models)s.")
                    % {"batch": batch, "models": ", ".join(refused)},
                    messages.ERROR,
                )
                refusals += 1
                continue
            cancelled += batch.cancel()
        if cancelled or not refusals:
            self.message_user(request, f"{cancelled} jobs cancelled.", messages.SUCCESS)
