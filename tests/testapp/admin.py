"""Admins of the test models: a domain admin composed with QueueAdminMixin."""

from __future__ import annotations

from django.contrib import admin

from django_dbqueue.admin import QueueAdminMixin

from .models import AtomicWorkflow, Job, Ticket, UniqueJob


@admin.register(Ticket)
class TicketAdmin(QueueAdminMixin, admin.ModelAdmin):
    list_display = ("subject", "customer", "handled")
    list_filter = ("handled",)
    search_fields = ("=customer", "subject")
    actions = ("mark_handled",)

    @admin.action(description="Mark handled", permissions=["change"])
    def mark_handled(self, request, queryset):  # type: ignore[no-untyped-def]
        queryset.update(handled=True)


@admin.register(Job)
class JobAdmin(QueueAdminMixin, admin.ModelAdmin):
    """The mixin with no admin configuration of its own."""


@admin.register(UniqueJob)
class UniqueJobAdmin(QueueAdminMixin, admin.ModelAdmin):
    """A model with a unique key (tests/features/flow/test_unique.py)."""


@admin.register(AtomicWorkflow)
class AtomicWorkflowAdmin(QueueAdminMixin, admin.ModelAdmin):
    """A durable workflow's page: its timeline and the fork button
    (tests/surfaces/admin/test_admin_workflows.py)."""
