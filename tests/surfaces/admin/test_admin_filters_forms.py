"""Issue 26, items 2, 3 and 6: date-only range filters, invalid filters, dates a database
cannot hold, and the admin's wording."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_dbqueue.models import QueueAttempt
from django_dbqueue.queue.history import AttemptOutcome
from django_dbqueue.states import QueueState
from tests.surfaces.admin.test_admin import URL, make_rows, post_action, snapshot
from tests.testapp.models import Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows() -> dict[str, int]:
    return make_rows()


DAY = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=10)


def messages_of(response: Any) -> str:
    return " ".join(str(m) for m in get_messages(response.wsgi_request))


@pytest.fixture
def days() -> dict[str, int]:
    """Tickets enqueued around one day: just before it, within it, just after it."""
    moments = {
        "day before, last second": DAY - timedelta(microseconds=1),
        "first second": DAY,
        "noon": DAY + timedelta(hours=12),
        "last microsecond": DAY + timedelta(days=1, microseconds=-1),
        "next day": DAY + timedelta(days=1),
    }
    pks = {}
    for name, moment in moments.items():
        ticket = Ticket.objects.create(subject=name, customer=1)
        Ticket.objects.filter(pk=ticket.pk).update(queue_enqueued_at=moment)
        pks[name] = ticket.pk
    return pks


def shown(client: Client, params: dict[str, str]) -> set[str]:
    response = client.get(URL, params)
    assert response.status_code == 200
    return {ticket.subject for ticket in response.context["cl"].result_list}


def test_a_date_without_a_time_means_the_whole_day(admin_client: Client, days: dict[str, int]) -> None:
    day = DAY.strftime("%Y-%m-%d")
    params = {
        "queue_enqueued_at__range__gte_0": day,
        "queue_enqueued_at__range__gte_1": "",
        "queue_enqueued_at__range__lte_0": day,
        "queue_enqueued_at__range__lte_1": "",
    }
    assert shown(admin_client, params) == {"first second", "noon", "last microsecond"}
    # only a start, or only an end
    after = {k: v for k, v in params.items() if "gte" in k}
    assert shown(admin_client, after) == {"first second", "noon", "last microsecond", "next day"}
    before = {k: v for k, v in params.items() if "lte" in k}
    assert shown(admin_client, before) == {
        "day before, last second",
        "first second",
        "noon",
        "last microsecond",
    }
    # a time given is still honoured
    assert shown(admin_client, {**params, "queue_enqueued_at__range__lte_1": "12:00:00"}) == {
        "first second",
        "noon",
    }
    response = admin_client.get(URL, params)
    assert b"dbqueue-filter-errors" not in response.content and response.context["action_form"] is not None


BAD = {"queue_enqueued_at__range__gte_0": "2026-13-45", "queue_enqueued_at__range__gte_1": ""}


def test_an_invalid_filter_is_named_at_the_top_and_turns_actions_off(
    admin_client: Client, rows: dict[str, int]
) -> None:
    response = admin_client.get(URL, BAD)
    html = response.content.decode()
    assert response.status_code == 200
    errors = html.index('id="dbqueue-filter-errors"')
    # Above the search bar and the filters (Django 5.2 and 6.x order those two differently).
    assert errors < html.index('id="changelist-filter"') and errors < html.index('id="changelist-search"')
    assert "was not applied: Enter a valid date." in html
    assert response.context["action_form"] is None and 'name="action"' not in html
    assert 'id="dbqueue-take-form"' not in html


def test_an_action_posted_with_an_invalid_filter_changes_nothing(
    admin_client: Client, rows: dict[str, int]
) -> None:
    before = snapshot()
    query = "?" + "&".join(f"{k}={v}" for k, v in BAD.items())
    data = {"action": "dbqueue_cancel", "_selected_action": [str(rows["ready"])], "select_across": "1"}
    response = admin_client.post(URL + query, {**data, "index": "0"}, follow=True)
    assert "No action was run." in messages_of(response)
    response = admin_client.post(
        URL + query, {**data, "dbqueue_apply": "1", "dbqueue_expected": "4"}, follow=True
    )
    assert "No action was run." in messages_of(response)
    take = admin_client.post(reverse("admin:testapp_ticket_dbqueue_take") + query, {"n": "5"}, follow=True)
    assert "Nothing was taken." in messages_of(take)
    assert snapshot() == before


HUGE = [
    ({"delay": "3000000", "unit": "days"}, "That delay is too long"),
    ({"delay": "999999999", "unit": "days"}, "That delay is too long"),
    ({"delay": "99999999999", "unit": "days"}, "That delay is too long"),
    ({"delay": "99999999999999", "unit": "minutes"}, "That delay is too long"),
    ({"run_at": "9999-12-31T23:59"}, "too far ahead"),
    ({"run_at": "0001-01-01T00:00"}, "is in the past"),
    ({"run_at": "1970-01-01T00:00"}, "is in the past"),
]


@pytest.mark.parametrize(("form", "error"), HUGE)
def test_reschedule_refuses_dates_a_database_cannot_hold(
    admin_client: Client, rows: dict[str, int], form: dict[str, str], error: str
) -> None:
    before = snapshot()
    for across in ("0", "1"):
        extra = {"dbqueue_expected": "3"} if across == "1" else {}
        response = admin_client.post(
            URL,
            {
                "action": "dbqueue_reschedule",
                "_selected_action": [str(rows["ready"])],
                "select_across": across,
                "dbqueue_apply": "1",
                **extra,
                **form,
            },
        )
        assert response.status_code == 200, response.status_code
        assert error in response.content.decode()
    assert snapshot() == before


def test_reschedule_accepts_the_usual_dates(admin_client: Client, rows: dict[str, int]) -> None:
    post_action(
        admin_client, "dbqueue_reschedule", [rows["ready"]], dbqueue_apply="1", delay="365", unit="days"
    )
    due = Ticket.objects.get(pk=rows["ready"]).queue_run_at
    assert timedelta(days=364) < due - timezone.now() < timedelta(days=366)
    soon = (timezone.localtime() - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    post_action(admin_client, "dbqueue_reschedule", [rows["ready"]], dbqueue_apply="1", run_at=soon)
    assert Ticket.objects.get(pk=rows["ready"]).queue_run_at < timezone.now()


def test_the_reschedule_page_reads_well(admin_client: Client, rows: dict[str, int]) -> None:
    html = post_action(admin_client, "dbqueue_reschedule", [rows["ready"]]).content.decode()
    assert ">Unit:</label>" in html and ">unit:</label>" not in html
    assert 'step="1"' in html  # seconds can be typed


def test_filter_heading_and_times_to_the_second(admin_client: Client, rows: dict[str, int]) -> None:
    exact = datetime(2031, 5, 4, 3, 2, 1, tzinfo=timezone.get_current_timezone())
    Ticket.objects.filter(pk=rows["scheduled"]).update(queue_run_at=exact)
    html = admin_client.get(URL).content.decode()
    assert "By last error" in html and "By has error" not in html
    assert "2031-05-04 03:02:01" in html


def _take_one(client: Client) -> Ticket:
    client.post(reverse("admin:testapp_ticket_dbqueue_take") + "?customer=1", {"n": "1"})
    return client.get(reverse("admin:testapp_ticket_dbqueue_mine")).context["items"][0]


def outcome(client: Client, item: Ticket, value: str, **extra: str) -> Any:
    data = {"pk": str(item.pk), "token": str(item.queue_token), "outcome": value, **extra}
    return client.post(reverse("admin:testapp_ticket_dbqueue_mine"), data, follow=True)


def test_outcome_messages_are_sentences(admin_client: Client, rows: dict[str, int]) -> None:
    item = _take_one(admin_client)
    text = messages_of(outcome(admin_client, item, "defer"))
    assert text == "Not recorded. Deferring needs a date."
    text = messages_of(outcome(admin_client, item, "defer", defer_until="1900-01-01T00:00"))
    assert text.startswith("Not recorded. Defer until: 1900-01-01 00:00:00 is in the past.")
    assert "__all__" not in text and "*" not in text
    assert Ticket.objects.get(pk=item.pk).queue_state == QueueState.RUNNING
    assert messages_of(outcome(admin_client, item, "release")) == f"{item} is handed back to the queue."
    item = _take_one(admin_client)
    assert messages_of(outcome(admin_client, item, "done")) == f"{item} is done."


def test_claim_columns_only_on_a_held_row(admin_client: Client, rows: dict[str, int]) -> None:
    finished = admin_client.get(reverse("admin:testapp_ticket_change", args=[rows["succeeded"]]))
    assert b"Locked by" not in finished.content and b"Locked until" not in finished.content
    running = admin_client.get(reverse("admin:testapp_ticket_change", args=[rows["running"]]))
    assert b"Locked by" in running.content and b"host:1" in running.content


def test_an_attempt_page_keeps_the_tracebacks_indentation(admin_client: Client, rows: dict[str, int]) -> None:
    error = 'Traceback (most recent call last):\n  File "shop/models.py", line 80, in process\nValueError: x'
    now = timezone.now()
    attempt = QueueAttempt.objects.create(
        model="testapp.Ticket",
        object_id=str(rows["failed"]),
        attempt=1,
        worker_id="host:1",
        claimed_at=now,
        finished_at=now,
        outcome=AttemptOutcome.FAILED,
        error=error,
    )
    html = admin_client.get(reverse("admin:django_dbqueue_queueattempt_change", args=[attempt.pk])).content
    assert b'<pre class="dbqueue-traceback">Traceback (most recent call last):\n  File &quot;shop' in html


def test_the_state_filter_and_the_change_form_show_the_states_labels(
    admin_client: Client, rows: dict[str, int]
) -> None:
    """The column carries no choices (issue #32): the sidebar and the change form take the
    labels from QueueState, and the filter's parameter is the one links already use."""
    response = admin_client.get(URL, {"queue_state__exact": "failed"})
    assert response.status_code == 200
    listed = response.context["cl"].result_list
    assert listed and {t.queue_state for t in listed} == {QueueState.FAILED}
    sidebar = response.content.decode()
    for label in QueueState.labels:
        assert f">{label}</a>" in sidebar, label
    failed = listed[0]
    form = admin_client.get(reverse("admin:testapp_ticket_change", args=[failed.pk])).content.decode()
    assert "failed after" in form  # the state as the list shows it, not the bare value
