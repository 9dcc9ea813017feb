"""Issue 26, item 4: every page of a big list ordered by its key costs what the first one does.

A link to a neighbouring page carries the shown page's edge, so paging either way shows every
row once, in order, with gaps in the keys; a deep page asked for by number alone is placed by
key. Neither runs an OFFSET deeper than ``offset_limit`` (the old middle page of 1,000,000
orders walked 500,000 index entries)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

import pytest
from django.contrib import admin
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext

from django_dbqueue.admin import pagination
from django_dbqueue.admin.keyset import KEY_VAR
from tests.surfaces.admin.test_admin import URL
from tests.testapp.models import Ticket

pytestmark = pytest.mark.django_db

OFFSET_LIMIT = 150


@pytest.fixture
def tickets(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """1,100 tickets whose keys have gaps: a block of 200 deleted, and every third of another
    300, so that interpolating between the first and last keys is not exact."""
    Ticket.queue_queryset().bulk_enqueue([{"subject": f"t{i}", "customer": i % 7} for i in range(1_400)])
    keys = list(Ticket.objects.order_by("pk").values_list("pk", flat=True))
    Ticket.objects.filter(pk__in=keys[300:500] + keys[800:1100:3]).delete()
    monkeypatch.setattr(pagination.EstimatedCountPaginator, "exact_limit", 10)
    monkeypatch.setattr(pagination.EstimatedCountPaginator, "offset_limit", OFFSET_LIMIT)
    return list(Ticket.objects.order_by("pk").values_list("pk", flat=True))  # the list's order (Meta)


def estimate(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """What the database's statistics would say (an estimate, possibly off)."""
    monkeypatch.setattr(pagination, "table_row_estimate", lambda model, using: rows)


def visit(user: Any, params: dict[str, str]) -> tuple[Any, list[int], list[str]]:
    request = RequestFactory().get(URL, params)
    request.user = user
    with CaptureQueriesContext(connection) as queries:
        changelist = admin.site._registry[Ticket].get_changelist_instance(request)
        shown = [t.pk for t in changelist.result_list]
    return changelist, shown, [q["sql"] for q in queries.captured_queries]


def link(changelist: Any, number: int) -> dict[str, str]:
    """The query of the page link the admin's pagination renders for page ``number``."""
    return dict(parse_qsl(changelist.get_query_string({PAGE_VAR: number})[1:]))


def offsets(statements: list[str]) -> list[int]:
    return [int(n) for s in statements if "testapp_ticket" in s for n in re.findall(r"OFFSET (\d+)", s)]


def walk(user: Any, start: int, step: int) -> tuple[list[list[int]], list[int]]:
    """Follow the neighbour links from page ``start`` to the list's other end."""
    changelist, shown, statements = visit(user, {PAGE_VAR: str(start)})
    pages, deepest = [shown], offsets(statements)
    while 1 <= changelist.page_num + step <= changelist.paginator.num_pages:
        changelist, shown, statements = visit(user, link(changelist, changelist.page_num + step))
        pages.append(shown)
        deepest += offsets(statements)
    return pages, deepest


def test_neighbour_links_page_through_every_row_once_in_order(
    admin_user: Any, tickets: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    estimate(monkeypatch, len(tickets))
    forwards, deepest = walk(admin_user, 1, +1)
    assert len(forwards) == 11
    assert [pk for page in forwards for pk in page] == tickets
    assert max(deepest, default=0) <= OFFSET_LIMIT + 100  # only pages near either end count by OFFSET
    backwards, deepest = walk(admin_user, 11, -1)
    assert [pk for page in reversed(backwards) for pk in page] == tickets
    assert max(deepest, default=0) <= OFFSET_LIMIT + 100


@pytest.mark.parametrize("off_by", [0.8, 1.25])
def test_with_an_estimate_that_is_off_paging_never_repeats_a_row_and_ends_at_the_true_ends(
    admin_user: Any, tickets: list[int], monkeypatch: pytest.MonkeyPatch, off_by: float
) -> None:
    rows = int(len(tickets) * off_by)
    estimate(monkeypatch, rows)
    pages, _ = walk(admin_user, 1, +1)
    assert len(pages) == (rows + 99) // 100
    assert pages[-1] == tickets[-(rows - (len(pages) - 1) * 100) :]  # the true last rows
    # Up to the last page, each row once, in order, nothing skipped (then, with too high an
    # estimate, empty pages; with too low a one, the last page is further on than its number).
    before_last = [pk for page in pages[:-1] for pk in page]
    assert before_last == tickets[: len(before_last)]
    assert len(before_last) == min(len(tickets), (len(pages) - 1) * 100)


def test_a_deep_page_by_number_is_placed_by_key_without_an_offset(
    admin_user: Any, tickets: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    estimate(monkeypatch, len(tickets))
    changelist, shown, statements = visit(admin_user, {PAGE_VAR: "6"})
    assert offsets(statements) == [], statements
    assert len(shown) == 100
    start = tickets.index(shown[0])
    assert shown == tickets[start : start + 100]  # a run of the list, in its order
    assert abs(start - 500) <= 250  # about where page 6 of 1,100 is: the keys have gaps
    # Its neighbours continue from its edges.
    after = visit(admin_user, link(changelist, 7))[1]
    before = visit(admin_user, link(changelist, 5))[1]
    assert before + shown + after == tickets[start - 100 : start + 200]


def test_the_cursor_is_no_filter_and_no_other_link_carries_it(
    admin_client: Client, admin_user: Any, tickets: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    estimate(monkeypatch, len(tickets))
    changelist, shown, _ = visit(admin_user, {PAGE_VAR: "6"})
    cursor = link(changelist, 7)[KEY_VAR]
    page = admin_client.get(URL, {PAGE_VAR: "6"}).content.decode()
    assert f"{KEY_VAR}={cursor}" in page and f"{KEY_VAR}=5b" in page  # the links rendered
    # The first and last pages are found by number (the true ends): their links carry nothing.
    assert KEY_VAR not in link(visit(admin_user, {PAGE_VAR: "2"})[0], 1)
    assert KEY_VAR not in link(visit(admin_user, {PAGE_VAR: "10"})[0], 11)
    response = admin_client.get(URL, {PAGE_VAR: "7", KEY_VAR: cursor})
    assert response.status_code == 200  # not the "?e=1" of an unknown filter
    on_seven = response.context["cl"]
    assert on_seven.result_list[0].pk == tickets[tickets.index(shown[-1]) + 1]
    for query in (
        on_seven.get_query_string({ORDER_VAR: "1"}),  # a column header
        on_seven.get_query_string({"queue_state__exact": "ready"}),  # a filter
        on_seven.get_query_string({PAGE_VAR: 9}),  # a page that is no neighbour
    ):
        assert KEY_VAR not in query, query
    # A cursor for another page, or a made-up one, is ignored: the page by its number.
    by_number = visit(admin_user, {PAGE_VAR: "7"})[1]
    for forged in (cursor.replace("7a", "8a", 1), "7a1;DROP TABLE x", "7c1", "x" * 50):
        assert visit(admin_user, {PAGE_VAR: "7", KEY_VAR: forged})[1] == by_number, forged


def test_a_list_sorted_by_another_column_pages_by_offset_with_plain_links(
    admin_user: Any, tickets: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    estimate(monkeypatch, len(tickets))
    changelist, shown, _ = visit(admin_user, {PAGE_VAR: "3", ORDER_VAR: "1"})  # by subject
    expected = list(Ticket.objects.order_by("subject", "-pk").values_list("pk", flat=True))
    assert shown == expected[200:300]
    assert KEY_VAR not in changelist.get_query_string({PAGE_VAR: 4})
