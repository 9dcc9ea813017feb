"""Issue 26, item 1: "select all" says exactly what it will change, and refuses to act on a
set that moved since; estimates are marked as estimates."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_dbqueue.admin import pagination
from django_dbqueue.states import QueueState
from tests.surfaces.admin.test_admin import URL, make_rows, snapshot
from tests.testapp.models import Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows() -> dict[str, int]:
    return make_rows()


def first_step(client: Client, query: str, action: str, pk: int) -> Any:
    data = {"action": action, "_selected_action": [str(pk)], "select_across": "1", "index": "0"}
    return client.post(URL + query, data)


def confirm(client: Client, query: str, action: str, pk: int, expected: Any, **form: str) -> Any:
    data = {
        "action": action,
        "_selected_action": [str(pk)],
        "select_across": "1",
        "dbqueue_apply": "1",
        "dbqueue_expected": str(expected),
        **form,
    }
    return client.post(URL + query, data, follow=True)


def messages_of(response: Any) -> str:
    return " ".join(str(m) for m in get_messages(response.wsgi_request))


def more_tickets(n: int, state: str = QueueState.READY) -> None:
    for i in range(n):
        ticket = Ticket.objects.create(subject=f"extra {i}", customer=1)
        Ticket.objects.filter(pk=ticket.pk).update(queue_state=state)


ACTIONS = [
    # action, the rows of the fixture it changes (of the 7 without an error), form
    ("dbqueue_retry_now", {"ready", "scheduled"}, {}),
    ("dbqueue_reprioritize", {"ready", "scheduled", "succeeded", "cancelled", "idle"}, {"priority": "3"}),
    ("dbqueue_reschedule", {"ready", "scheduled"}, {"delay": "5", "unit": "minutes"}),
    ("dbqueue_cancel", {"ready", "scheduled", "idle"}, {}),
    ("dbqueue_enqueue_again", {"succeeded", "cancelled", "idle"}, {}),
    ("dbqueue_delete", {"ready", "scheduled", "succeeded", "cancelled", "idle"}, {}),
]


@pytest.mark.parametrize(("action", "expected", "form"), ACTIONS)
def test_select_all_shows_the_exact_number_before_it_changes_anything(
    admin_client: Client, rows: dict[str, int], action: str, expected: set[str], form: dict[str, str]
) -> None:
    query = "?queue_has_error=no"  # 6 rows (running included), 5 or fewer to change
    before = snapshot()
    page = first_step(admin_client, query, action, rows["ready"])
    assert page.status_code == 200 and b"dbqueue-action-form" in page.content
    assert snapshot() == before  # every action on all matching rows confirms first
    n = len(expected)
    assert page.context["expected"] == n
    assert f"This will change exactly {n} tickets" in page.content.decode()
    response = confirm(admin_client, query, action, rows["ready"], n, **form)
    after = snapshot()
    changed = {pk for pk in before if after.get(pk) != before[pk]}
    assert {name for name, pk in rows.items() if pk in changed} == expected
    assert f" {n} tickets matching the filter" in messages_of(response)


def test_select_all_refuses_when_the_set_grew_since_the_page(
    admin_client: Client, rows: dict[str, int]
) -> None:
    query = "?queue_state__exact=ready"
    page = first_step(admin_client, query, "dbqueue_reprioritize", rows["ready"])
    assert page.context["expected"] == 3
    more_tickets(4)  # the set moves: 7 ready rows now
    before = snapshot()
    response = confirm(admin_client, query, "dbqueue_reprioritize", rows["ready"], 3, priority="9")
    assert snapshot() == before  # rolled back: nothing changed
    html = response.content.decode()
    assert response.context["expected"] == 7
    assert "Nothing was changed" in html and "(3 then, 7 now)" in html
    assert "This will change exactly 7 tickets" in html
    # confirming the new number runs it
    response = confirm(admin_client, query, "dbqueue_reprioritize", rows["ready"], 7, priority="9")
    assert Ticket.objects.filter(queue_priority=9).count() == 7
    assert "Set priority 9 on 7 tickets matching the filter." in messages_of(response)


def test_select_all_runs_within_the_tolerance(
    admin_client: Client, rows: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin.site._registry[Ticket], "dbqueue_select_all_tolerance", 0.5)
    query = "?queue_state__exact=ready"
    more_tickets(1)  # 4 ready rows; 4 +/- 2 is accepted
    confirm(admin_client, query, "dbqueue_cancel", rows["ready"], 5)
    assert Ticket.objects.filter(queue_state=QueueState.READY).count() == 0
    more_tickets(10)  # 10 against 5 confirmed: refused
    confirm(admin_client, query, "dbqueue_cancel", rows["ready"], 5)
    assert Ticket.objects.filter(queue_state=QueueState.READY).count() == 10


def test_select_all_without_a_confirmed_number_changes_nothing(
    admin_client: Client, rows: dict[str, int]
) -> None:
    before = snapshot()
    data = {"action": "dbqueue_retry_now", "_selected_action": [str(rows["ready"])], "select_across": "1"}
    for extra in ({"index": "0"}, {"dbqueue_apply": "1"}, {"dbqueue_apply": "1", "dbqueue_expected": "x"}):
        response = admin_client.post(URL, {**data, **extra})
        assert response.status_code == 200 and b"dbqueue-action-form" in response.content
    assert snapshot() == before


def test_ticked_rows_still_run_at_once(admin_client: Client, rows: dict[str, int]) -> None:
    data = {"action": "dbqueue_cancel", "_selected_action": [str(rows["ready"])], "index": "0"}
    admin_client.post(URL, {**data, "select_across": "0"})
    assert Ticket.objects.get(pk=rows["ready"]).queue_state == QueueState.CANCELLED


def test_estimated_counts_are_marked_as_estimates(
    admin_client: Client, rows: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pagination, "table_row_estimate", lambda model, using: 1_234_567)
    html = admin_client.get(URL).content.decode()
    assert "About 1,234,567 tickets (an estimate" in html
    assert "Select all matching tickets (about 1,234,567, an estimate)" in html
    assert "1234567 tickets" not in html and "Select all 1234567" not in html
    # a filtered list above the exact limit whose size the planner cannot tell
    monkeypatch.setattr(pagination.EstimatedCountPaginator, "exact_limit", 2)
    monkeypatch.setattr(pagination, "plan_row_estimate", lambda qs: None)
    html = admin_client.get(URL, {"queue_has_error": "no"}).content.decode()
    assert "More than 2 tickets" in html and "Select all matching tickets (more than 2)" in html
    assert "More than 2 results" in html  # the search bar's count
    assert "Select all 3 tickets" not in html and "3 results" not in html


def test_counts_and_messages_have_thousands_separators(admin_client: Client) -> None:
    Ticket.queue_queryset().bulk_enqueue([{"subject": f"t{i}", "customer": 5} for i in range(1_200)])
    query = "?customer=5"
    page = first_step(admin_client, query, "dbqueue_cancel", Ticket.objects.first().pk)
    assert "This will change exactly 1,200 tickets" in page.content.decode()
    response = confirm(admin_client, query, "dbqueue_cancel", Ticket.objects.first().pk, 1_200)
    assert "Cancelled 1,200 tickets matching the filter." in messages_of(response)
    dashboard = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard")).content.decode()
    assert 'data-state="cancelled">1,200</td>' in dashboard
