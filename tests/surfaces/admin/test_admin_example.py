"""Issue 26, item 4: the example shop's admin as shipped (``list_select_related =
["customer"]``) keeps the page query on the queue table and fetches the customers of the
page's rows only. (Timings at 1,000,000 rows: bench/admin_changelist.py --example.)"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib import admin
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from shop.models import Customer, Order

pytestmark = pytest.mark.django_db

URL = reverse("admin:shop_order_changelist")


@pytest.fixture
def orders() -> list[Customer]:
    customers = [Customer.objects.create(name=f"customer {i}", country="DE" if i else "XX") for i in range(5)]
    Order.objects.bulk_create(
        [Order(customer=customers[i % 5], total=Decimal(i)) for i in range(250)], batch_size=100
    )
    return customers


def table(name: str) -> str:
    return connection.ops.quote_name(name)


def test_the_page_query_does_not_join_and_customers_come_by_the_pages_ids(
    admin_client: Client, orders: list[Customer]
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "customer 3" in html  # the related column is still shown
    statements = [q["sql"] for q in queries.captured_queries]
    # (Not the bounded count of RUNNING rows before "My items": ``COUNT(*) … LIMIT 1001``.)
    page = [
        s
        for s in statements
        if f"FROM {table('shop_order')}" in s and "LIMIT" in s.upper() and not s.startswith("SELECT COUNT(")
    ]
    assert len(page) == 1, statements
    assert "JOIN" not in page[0].upper(), page[0]
    # At most one statement brings the page's customers, by the page's ids; none per row.
    # (A country filter's list of distinct countries is the sidebar's, not the rows'.)
    customers = [s for s in statements if f"FROM {table('shop_customer')}" in s and "DISTINCT" not in s]
    assert len(customers) <= 1, statements
    page_ids = {o.customer_id for o in response.context["cl"].result_list}
    assert {c.pk for c in orders} == page_ids  # the 5 customers of the page's 100 orders


def test_count_and_filtered_pages_do_not_join_for_display(
    admin_client: Client, orders: list[Customer]
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL, {"queue_state__exact": "ready", "status": "new"})
    assert response.status_code == 200 and len(response.context["cl"].result_list) == 100
    joined = [
        q["sql"]
        for q in queries.captured_queries
        if f"FROM {table('shop_order')}" in q["sql"]
        and "JOIN" in q["sql"].upper()
        and "DISTINCT" not in q["sql"].upper()  # a list filter's choices, not the list
    ]
    assert joined == []


@pytest.mark.parametrize(
    ("select_related", "list_display", "fetched"),
    [
        (["customer"], ["id", "customer"], ["customer"]),
        (True, ["id"], ["customer"]),
        (False, ["id", "customer"], ["customer"]),
        (False, ["id", "customer_id"], []),
        ((), ["id"], []),
    ],
)
def test_related_rows_are_prefetched_whatever_list_select_related_says(
    admin_user: object,
    orders: list[Customer],
    monkeypatch: pytest.MonkeyPatch,
    select_related: object,
    list_display: list[str],
    fetched: list[str],
) -> None:
    model_admin = admin.site._registry[Order]
    monkeypatch.setattr(model_admin, "list_select_related", select_related)
    monkeypatch.setattr(model_admin, "list_display", list_display)
    request = RequestFactory().get(URL)
    request.user = admin_user
    changelist = model_admin.get_changelist_instance(request)
    assert not changelist.queryset.query.select_related
    assert list(changelist.queryset._prefetch_related_lookups) == fetched
    with CaptureQueriesContext(connection) as queries:
        shown = [str(order.customer) for order in changelist.result_list]
    if fetched:  # the page and its customers: two queries, none per row
        assert len(shown) == 100 and len(queries.captured_queries) == 2


def test_the_status_filter_reads_no_distinct_values_from_the_orders(
    admin_client: Client, orders: list
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL)
    scans = [
        q["sql"] for q in queries.captured_queries if "DISTINCT" in q["sql"] and "shop_order" in q["sql"]
    ]
    assert scans == []
    assert "?status=fulfilled" in response.content.decode()
