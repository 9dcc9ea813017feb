from __future__ import annotations

from django.contrib import admin

from django_dbqueue.admin import QueueAdminMixin

from .models import Customer, CustomerSync, Invoice, Order


@admin.register(Order)
class OrderAdmin(QueueAdminMixin, admin.ModelAdmin):
    # The shop's own columns, filters and search; QueueAdminMixin adds the queue's after them
    # (state, priority, run at, attempts, last error; state/error/date/number range filters;
    # retry, reprioritise, reschedule, cancel, enqueue again, delete; dashboard; take items).
    list_display = ["id", "customer", "total", "status"]
    list_filter = ["status", "customer__country"]
    search_fields = ["customer__name"]
    list_select_related = ["customer"]


@admin.register(CustomerSync)
class CustomerSyncAdmin(QueueAdminMixin, admin.ModelAdmin):
    # Filled in bulk by the Spark pipeline (docs/spark.md); moderated like any queue.
    list_display = ["id", "customer", "synced_at"]
    list_filter = ["customer__country"]
    search_fields = ["customer__name"]


admin.site.register(Customer)
admin.site.register(Invoice)
