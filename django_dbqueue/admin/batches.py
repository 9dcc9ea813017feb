"""The Batch admin: progress of each batch (counters read from its row: no member is counted
when the page loads) and a Cancel action (docs/composition.md)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
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
        return False  # a batch is declared in code: with django_dbqueue.batches.batch()

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Batch) -> str:
        return when(obj.created_at)

    @admin.display(description=_("progress"))
    def progress_bar(self, obj: Batch) -> str:
        share = 100 if not obj.total else min(100, round(100 * obj.finished / obj.total))
        return format_html(
            '<progress max="100" value="{}"></progress> {} / {} finished', share, obj.finished, obj.total
        )

    @admin.action(description=_("Cancel the members of the selected batches that have not started"))
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        cancelled = sum(batch.cancel() for batch in queryset)
        self.message_user(request, f"{cancelled} jobs cancelled.", messages.SUCCESS)
