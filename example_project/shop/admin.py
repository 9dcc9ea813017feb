from __future__ import annotations

from django.contrib import admin

from .models import Customer, Invoice, Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "total", "status", "queue_state", "queue_attempts", "queue_run_at"]
    list_filter = ["queue_state", "status", "customer__country"]
    search_fields = ["customer__name"]
    show_full_result_count = False


admin.site.register(Customer)
admin.site.register(Invoice)
