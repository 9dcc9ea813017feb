"""Issue 26, item 4: the last pages of a big (estimated) list cost what the first ones do."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib import admin
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from django_dbqueue.admin import pagination
from tests.surfaces.admin.test_admin import URL
from tests.testapp.models import Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def tickets() -> list[int]:
    Ticket.queue_queryset().bulk_enqueue([{"subject": f"t{i}", "customer": i % 7} for i in range(250)])
    return list(Ticket.objects.order_by("pk").values_list("pk", flat=True))  # the list's order (Meta)


def page(user: Any, number: int) -> tuple[list[int], list[str]]:
    request = RequestFactory().get(URL, {"p": str(number)})
    request.user = user
    with CaptureQueriesContext(connection) as queries:
        changelist = admin.site._registry[Ticket].get_changelist_instance(request)
        shown = [t.pk for t in changelist.result_list]
    return shown, [q["sql"] for q in queries.captured_queries]


def offsets(statements: list[str]) -> list[int]:
    return [int(n) for s in statements if "testapp_ticket" in s for n in re.findall(r"OFFSET (\d+)", s)]


@pytest.mark.parametrize("estimate", [250, 240, 270])
def test_pages_in_the_second_half_are_read_from_the_end(
    admin_user: Any, tickets: list[int], monkeypatch: pytest.MonkeyPatch, estimate: int
) -> None:
    monkeypatch.setattr(pagination.EstimatedCountPaginator, "exact_limit", 10)
    monkeypatch.setattr(pagination, "table_row_estimate", lambda model, using: estimate)
    first, statements = page(admin_user, 1)
    assert first == tickets[:100]
    last_number = (estimate + 99) // 100
    last, statements = page(admin_user, last_number)
    size = estimate - (last_number - 1) * 100
    assert last == tickets[-size:]  # the true last rows, in the list's order
    assert max(offsets(statements), default=0) < 100, statements  # no OFFSET over the whole list
    if estimate == 250:  # an exact estimate: pages 2 and 3 join up
        assert page(admin_user, 2)[0] + last == tickets[100:]


def test_exact_lists_page_as_django_does(admin_user: Any, tickets: list[int]) -> None:
    assert page(admin_user, 3)[0] == tickets[200:]
