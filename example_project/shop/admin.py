from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_dbqueue.admin import QueueAdminMixin

from .models import Customer, CustomerSync, Invoice, Order


class StatusFilter(admin.SimpleListFilter):
    """The shop's statuses, named here: Django's filter for a plain text field lists the
    values it finds with ``SELECT DISTINCT status FROM shop_order``, a scan of every order."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("new", "new"), ("fulfilled", "fulfilled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(status=self.value()) if self.value() else queryset


@admin.register(Order)
class OrderAdmin(QueueAdminMixin, admin.ModelAdmin):
    # The shop's own columns, filters and search; QueueAdminMixin adds the queue's after them
    # (state, priority, run at, attempts, last error; state/error/date/number range filters;
    # retry, reprioritise, reschedule, cancel, enqueue again, delete; dashboard; take items).
    list_display = ["id", "customer", "total", "status"]
    list_filter = [StatusFilter, "customer__country"]
    search_fields = ["customer__name"]
    # The page query stays on shop_order all the same: QueueAdminMixin fetches the customers
    # of the page's orders in one more query instead of joining them into the page query.
    list_select_related = ["customer"]
    # The change form's customer is an id box with a lookup link, not a <select> of every
    # customer (5,000 options: 1.3 s of rendering per order page at 10,000,000 orders).
    raw_id_fields = ["customer"]


@admin.register(CustomerSync)
class CustomerSyncAdmin(QueueAdminMixin, admin.ModelAdmin):
    # Filled in bulk by the Spark pipeline (docs/spark.md); moderated like any queue.
    list_display = ["id", "customer", "synced_at"]
    list_filter = ["customer__country"]
    search_fields = ["customer__name"]


admin.site.register(Customer)
admin.site.register(Invoice)
