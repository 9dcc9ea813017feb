"""The JSON payload of a job in the bulk-enqueue measurement, the same for django_dbqueue and
the raw-SQL loop: an order-like document of about 150 bytes (a job's arguments, as a user's
would be), different for every row so nothing can be shared between rows."""

from __future__ import annotations

from typing import Any


def payload(number: int) -> dict[str, Any]:
    return {
        "order": number,
        "customer": f"customer{number % 50000}@example.com",
        "lines": [{"sku": "A-1", "quantity": 2}, {"sku": f"B-{number % 97}", "quantity": 1}],
        "note": "leave at the door",
    }
