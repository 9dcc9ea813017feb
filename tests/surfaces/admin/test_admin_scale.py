"""Issue 25, what the admin did at 10,000,000 rows (make bench-scale), at a small scale:

* a list filtered by a date range on an indexed column is shown in that column's order, newest
  first, so the database reads the range from the index instead of walking the primary key;
* the list's "My items (N)" counts a person's items only while few rows are RUNNING (their
  ``queue_locked_by`` is in no index: counting reads every running row);
* the example shop's order page shows its customer as an id box, not a <select> of every
  customer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from shop.models import Customer, Order

from django_dbqueue.compat import UTC
from django_dbqueue.states import QueueState
from tests.conftest import every_database
from tests.testapp.models import Ticket

pytestmark = [
    pytest.mark.django_db,
    every_database(
        "the lists' plans are each database's (EXPLAIN per vendor) and their estimates backend methods"
    ),
]

ORDERS = reverse("admin:shop_order_changelist")
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


@pytest.fixture
def orders() -> list[Order]:
    """120 finished orders whose finishing times run against their keys: the newest key
    finished first, like a table whose range lies deep in the key order."""
    customer = Customer.objects.create(name="customer", country="DE")
    Order.objects.bulk_create(
        [Order(customer=customer, total=Decimal(i), status="fulfilled") for i in range(120)], batch_size=100
    )
    rows = list(Order.objects.order_by("pk"))
    for i, order in enumerate(rows):
        Order.objects.filter(pk=order.pk).update(
            queue_state=QueueState.SUCCEEDED, queue_finished_at=NOW - timedelta(hours=i)
        )
    return rows


def page_sql(queries: CaptureQueriesContext, table: str) -> str:
    quoted = connection.ops.quote_name(table)
    pages = [
        q["sql"] for q in queries.captured_queries if f"FROM {quoted}" in q["sql"] and "ORDER BY" in q["sql"]
    ]
    pages = [sql for sql in pages if "COUNT(" not in sql.upper()]
    assert pages, [q["sql"] for q in queries.captured_queries]
    return pages[-1]


def in_range(client: Client, url: str, **extra: str) -> tuple[list, str]:
    params = {
        "queue_finished_at__range__gte_0": "2026-11-17",
        "queue_finished_at__range__lte_0": "2026-11-19",
        **extra,
    }
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params)
    assert response.status_code == 200
    table = response.context["cl"].model._meta.db_table
    return list(response.context["cl"].result_list), page_sql(queries, table)


def test_a_range_on_an_indexed_date_lists_newest_first_by_that_column(
    admin_client: Client, orders: list[Order]
) -> None:
    shown, sql = in_range(admin_client, ORDERS)
    finished = [order.queue_finished_at for order in shown]
    # Nov 17 00:00 to Nov 19 23:59: the orders finished 13 to 84 hours before Nov 20 12:00.
    assert len(shown) == 72
    assert finished == sorted(finished, reverse=True)
    assert finished[0] == NOW - timedelta(hours=13)
    column = connection.ops.quote_name("queue_finished_at")
    assert f"ORDER BY {connection.ops.quote_name('shop_order')}.{column} DESC" in sql, sql


def test_a_column_header_still_chooses_the_order(admin_client: Client, orders: list[Order]) -> None:
    # Column 1 of OrderAdmin's list_display is "id": ascending.
    shown, sql = in_range(admin_client, ORDERS, o="1")
    assert [o.pk for o in shown] == sorted(o.pk for o in shown)
    assert "queue_finished_at` DESC" not in sql and 'queue_finished_at" DESC' not in sql


def test_a_range_on_a_date_no_index_leads_keeps_the_key_order(admin_client: Client) -> None:
    # The test app's Ticket has only the claim index (state first): ordering by the date
    # would sort every row of the range, so the list keeps its own order (id ascending).
    tickets = Ticket.objects.bulk_create([Ticket(subject=f"t{i}") for i in range(5)])
    for i, ticket in enumerate(tickets):
        Ticket.objects.filter(pk=ticket.pk).update(
            queue_state=QueueState.SUCCEEDED, queue_finished_at=NOW - timedelta(days=1, hours=i)
        )
    shown, sql = in_range(admin_client, reverse("admin:testapp_ticket_changelist"))
    assert [t.pk for t in shown] == sorted(t.pk for t in tickets)
    assert "queue_finished_at` DESC" not in sql and 'queue_finished_at" DESC' not in sql


def test_the_second_page_of_a_range_continues_in_the_same_order(
    admin_client: Client, orders: list[Order], settings
) -> None:
    from shop.admin import OrderAdmin

    first, _ = in_range(admin_client, ORDERS)
    OrderAdmin.list_per_page, saved = 50, OrderAdmin.list_per_page
    try:
        page1, _ = in_range(admin_client, ORDERS)
        page2, _ = in_range(admin_client, ORDERS, p="2")
    finally:
        OrderAdmin.list_per_page = saved
    assert [o.pk for o in page1 + page2] == [o.pk for o in first]


def test_the_order_page_shows_its_customer_as_an_id_box(admin_client: Client, orders: list[Order]) -> None:
    for i in range(30):
        Customer.objects.create(name=f"someone {i}")
    response = admin_client.get(reverse("admin:shop_order_change", args=[orders[0].pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="customer"' in html
    assert "someone 29" not in html  # no <option> per customer


def mine_link(client: Client) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(ORDERS)
    assert response.status_code == 200
    html = response.content.decode()
    link = html[html.index('id="dbqueue-mine-link"') :]
    return link[link.index(">") + 1 : link.index("</a>")], [q["sql"] for q in queries.captured_queries]


def test_my_items_are_counted_while_few_rows_run(admin_client: Client, orders: list[Order]) -> None:
    running = [o.pk for o in orders[:3]]
    Order.objects.filter(pk__in=running[:2]).update(queue_state=QueueState.RUNNING, queue_locked_by="web-1:7")
    Order.objects.filter(pk=running[2]).update(queue_state=QueueState.RUNNING, queue_locked_by="user:admin")
    text, statements = mine_link(admin_client)
    assert text == "My items (1)"
    assert any("queue_locked_by" in sql for sql in statements)


def test_above_the_limit_the_link_has_no_number_and_no_row_is_read(
    admin_client: Client, orders: list[Order], monkeypatch: pytest.MonkeyPatch
) -> None:
    from shop.admin import OrderAdmin

    monkeypatch.setattr(OrderAdmin, "dbqueue_my_count_limit", 2)
    Order.objects.filter(pk__in=[o.pk for o in orders[:3]]).update(
        queue_state=QueueState.RUNNING, queue_locked_by="user:admin"
    )
    text, statements = mine_link(admin_client)
    assert text == "My items"
    # Only the bounded count of RUNNING rows (index only), no count by queue_locked_by.
    assert not any("queue_locked_by" in sql and "COUNT" in sql.upper() for sql in statements), statements


def test_the_dashboard_reads_a_bounded_number_of_running_rows(
    admin_client: Client, orders: list[Order], monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_dbqueue.admin import stats

    later = datetime.now(UTC) + timedelta(minutes=5)
    Order.objects.filter(pk__in=[o.pk for o in orders[:3]]).update(
        queue_state=QueueState.RUNNING, queue_locked_by="web-1:7", queue_locked_until=later
    )
    assert stats.queue_stats(Order)["workers"] == [("web-1:7", 3)]
    assert stats.queue_stats(Order)["holders_limited"] is None
    monkeypatch.setattr(stats, "HOLDERS_LIMIT", 2)
    with CaptureQueriesContext(connection) as queries:
        found = stats.queue_stats(Order)
    assert found["workers"] == [("web-1:7", 2)] and found["holders_limited"] == 2
    holders = [q["sql"] for q in queries.captured_queries if "queue_locked_by" in q["sql"]]
    assert holders and all("LIMIT 3" in sql for sql in holders), holders
    response = admin_client.get(reverse("admin:shop_order_dbqueue_dashboard"))
    assert b'id="dbqueue-holders-limited"' in response.content


def test_the_dashboard_counts_live_leases_among_the_running_rows_it_reads(
    admin_client: Client, orders: list[Order], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Leases that ran out are read but not counted as held (the lease is tested per row read,
    # so a fleet of expired leases is not read to the end looking for live ones).
    from django_dbqueue.admin import stats

    now = datetime.now(UTC)
    Order.objects.filter(pk__in=[o.pk for o in orders[:2]]).update(
        queue_state=QueueState.RUNNING,
        queue_locked_by="web-1:7",
        queue_locked_until=now + timedelta(minutes=5),
    )
    Order.objects.filter(pk__in=[o.pk for o in orders[2:6]]).update(
        queue_state=QueueState.RUNNING,
        queue_locked_by="web-2:9",
        queue_locked_until=now - timedelta(minutes=5),
    )
    found = stats.queue_stats(Order)
    assert found["workers"] == [("web-1:7", 2)] and found["holders_limited"] is None
    monkeypatch.setattr(stats, "HOLDERS_LIMIT", 3)
    with CaptureQueriesContext(connection) as queries:
        found = stats.queue_stats(Order)
    assert found["holders_limited"] == 3
    holders = [q["sql"] for q in queries.captured_queries if "queue_locked_by" in q["sql"]]
    assert holders and all("LIMIT 4" in sql for sql in holders), holders


def test_the_example_orders_have_the_indexes_its_filters_need() -> None:
    from django_dbqueue.admin.stats import has_index

    # In the database (shop's migration 0005): the status filter, the finished range alone,
    # and the finished range of one state (the list, its count and "select all" over it).
    for columns in (("status",), ("queue_finished_at",), ("queue_state", "queue_finished_at")):
        assert has_index(Order, "default", columns), columns


# -- issue 34, item 12: the attempt history's search reads an index, not every attempt ----------

ATTEMPTS = reverse("admin:django_dbqueue_queueattempt_changelist")


@pytest.fixture
def attempts() -> int:
    """A few thousand attempts of a few models and workers, and the planner's statistics."""
    from django_dbqueue.models import QueueAttempt

    rows = [
        QueueAttempt(
            model=("shop.Order", "testapp.Job", "shop.Invoice")[i % 3],
            object_id=str(i),
            attempt=1,
            worker_id=f"host-{i % 40}:{1000 + i % 40}",
            finished_at=NOW - timedelta(seconds=i),
            outcome="succeeded" if i % 7 else "failed",
            error="" if i % 7 else "Traceback (most recent call last):\nValueError: boom",
        )
        for i in range(6000)
    ]
    QueueAttempt.objects.bulk_create(rows, batch_size=1000)
    table = connection.ops.quote_name(QueueAttempt._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            {"mysql": f"ANALYZE TABLE {table}", "postgresql": f"ANALYZE {table}"}.get(
                connection.vendor, "ANALYZE"
            )
        )
        if connection.vendor == "mysql":
            cursor.fetchall()
    return len(rows)


def searched(client: Client, term: str) -> tuple[list, list[str]]:
    """The attempts the admin's search finds, and every statement that searched (the bounded
    count, the page's keys, the page's rows)."""
    from django_dbqueue.models import QueueAttempt

    with CaptureQueriesContext(connection) as queries:
        response = client.get(ATTEMPTS, {"q": term})
    assert response.status_code == 200
    table = connection.ops.quote_name(QueueAttempt._meta.db_table)
    words = [f"'{word}'" for word in term.split()]
    statements = [
        q["sql"]
        for q in queries.captured_queries
        if f"FROM {table}" in q["sql"] and any(w in q["sql"] for w in words)
    ]
    assert statements, [q["sql"] for q in queries.captured_queries]
    return list(response.context["cl"].result_list), statements


def plan_of(sql: str) -> str:
    """The database's plan of a captured statement, as text (the captured SQL has its
    parameters quoted in: EXPLAIN it as it ran)."""
    explain = {"mysql": "EXPLAIN FORMAT=JSON ", "postgresql": "EXPLAIN (FORMAT JSON) "}
    prefix = explain.get(connection.vendor, "EXPLAIN QUERY PLAN ")
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql.replace("%", "%%"))
        return " ".join(str(cell) for row in cursor.fetchall() for cell in row)


def steps(node: Any) -> Iterator[dict]:
    """Every object of a MariaDB JSON plan, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from steps(value)
    elif isinstance(node, list):
        for value in node:
            yield from steps(value)


def assert_no_full_scan(plan: str) -> None:
    """MariaDB reads no table from end to end (no "ALL" access), PostgreSQL no sequential scan."""
    from django_dbqueue.models import QueueAttempt

    table = QueueAttempt._meta.db_table
    if connection.vendor == "mysql":
        # "ALL" reads the table, "index" a whole index: either is every attempt. (A count's
        # outer "ALL" over its derived table reads the few rows the inner query found.)
        accesses = [
            step.get("access_type") for step in steps(json.loads(plan)) if step.get("table_name") == table
        ]
        assert accesses and not {"ALL", "index"} & set(accesses), plan
    elif connection.vendor == "postgresql":
        assert "Seq Scan" not in plan, plan
    else:  # SQLite: the results only (its planner's choices are not what this is about)
        assert table


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("4242", {("shop.Order", "4242")}),  # an object id alone
        ("shop.Invoice 4244", {("shop.Invoice", "4244")}),  # one row of one model
        ("host-7:1007", None),  # a worker's attempts (150 of them)
    ],
)
def test_the_attempt_search_reads_an_index(admin_client: Client, attempts: int, term: str, expected) -> None:
    found, statements = searched(admin_client, term)
    if expected is not None:
        assert {(a.model, a.object_id) for a in found} == expected
    else:
        assert found and all(a.worker_id == term for a in found)
    for sql in statements:
        assert_no_full_scan(plan_of(sql))


def test_the_attempt_history_in_a_date_range_is_listed_by_its_finished_at_index(
    admin_client: Client,
) -> None:
    # The history's keys run against its finishing times here (a late-written attempt of an
    # early finish): in a range the list follows finished_at, newest first, not the key.
    from django_dbqueue.models import QueueAttempt

    QueueAttempt.objects.bulk_create(
        QueueAttempt(
            model="shop.Order",
            object_id=str(i),
            attempt=1,
            outcome="succeeded",
            finished_at=NOW - timedelta(hours=i),
        )
        for i in range(40)
    )
    params = {"finished_at__range__gte_0": "2026-11-18", "finished_at__range__lte_0": "2026-11-19"}
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(ATTEMPTS, params)
    assert response.status_code == 200
    shown = [a.finished_at for a in response.context["cl"].result_list]
    # Nov 18 00:00 to Nov 19 23:59: the attempts finished 13 to 39 hours before Nov 20 12:00.
    assert len(shown) == 27 and shown == sorted(shown, reverse=True)
    assert shown[0] == NOW - timedelta(hours=13)
    sql = page_sql(queries, QueueAttempt._meta.db_table)
    column = connection.ops.quote_name("finished_at")
    assert f"ORDER BY {connection.ops.quote_name(QueueAttempt._meta.db_table)}.{column} DESC" in sql, sql
    # A column header still chooses (column 3 of the list is "attempt", then the key).
    response = admin_client.get(ATTEMPTS, {**params, "o": "-3"})
    assert response.status_code == 200 and len(response.context["cl"].result_list) == 27
