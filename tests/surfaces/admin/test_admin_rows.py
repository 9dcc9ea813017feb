"""Issue 26, items 5 and 7: no dead dashboard button on the package's other lists; a row's
own Retry now / Reschedule / Cancel buttons; "hand back all" for people."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_dbqueue.states import QueueState
from tests.surfaces.admin.test_admin import make_rows, snapshot, staff
from tests.testapp.models import Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows() -> dict[str, int]:
    return make_rows()


def messages_of(response: Any) -> str:
    return " ".join(str(m) for m in get_messages(response.wsgi_request))


@pytest.mark.parametrize("name", ["queueattempt", "workerprocess", "archivedmessage"])
def test_no_queue_dashboard_button_on_the_packages_other_lists(admin_client: Client, name: str) -> None:
    response = admin_client.get(reverse(f"admin:django_dbqueue_{name}_changelist"))
    assert response.status_code == 200
    assert b"Queue dashboard" not in response.content


@pytest.mark.parametrize("name", ["message", "taskrecord"])
def test_the_queue_lists_keep_their_dashboard(admin_client: Client, name: str) -> None:
    response = admin_client.get(reverse(f"admin:django_dbqueue_{name}_changelist"))
    dashboard = reverse(f"admin:django_dbqueue_{name}_dbqueue_dashboard")
    assert f'href="{dashboard}"' in response.content.decode()
    assert admin_client.get(dashboard).status_code == 200


def change_url(pk: int) -> str:
    return reverse("admin:testapp_ticket_change", args=[pk])


def row_url(pk: int, operation: str) -> str:
    return reverse("admin:testapp_ticket_dbqueue_row", args=[pk, operation])


BUTTONS = {
    "ready": {"retry", "reschedule", "cancel"},
    "scheduled": {"retry", "reschedule", "cancel"},
    "failed": {"retry"},
    "idle": {"cancel"},
    "running": set(),
    "succeeded": set(),
}


@pytest.mark.parametrize(("name", "buttons"), BUTTONS.items())
def test_a_rows_page_has_the_buttons_its_state_allows(
    admin_client: Client, rows: dict[str, int], name: str, buttons: set[str]
) -> None:
    html = admin_client.get(change_url(rows[name])).content.decode()
    found = {op for op in ("retry", "reschedule", "cancel") if f'id="dbqueue-row-{op}"' in html}
    assert found == buttons
    for op in buttons:
        assert f'action="{row_url(rows[name], op)}"' in html


def test_retry_now_and_cancel_from_a_rows_page(admin_client: Client, rows: dict[str, int]) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.post(row_url(rows["scheduled"], "retry"), follow=True)
    assert response.redirect_chain[-1][0] == change_url(rows["scheduled"])
    assert "is due now" in messages_of(response)
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith("UPDATE")]
    assert len([w for w in writes if "testapp_ticket" in w]) == 1
    assert Ticket.objects.get(pk=rows["scheduled"]).queue_run_at <= timezone.now()
    failed = rows["failed"]
    admin_client.post(row_url(failed, "retry"))
    assert Ticket.objects.filter(pk=failed).values_list("queue_state", "queue_attempts").get() == ("ready", 0)
    response = admin_client.post(row_url(rows["idle"], "cancel"), follow=True)
    assert Ticket.objects.get(pk=rows["idle"]).queue_state == QueueState.CANCELLED
    assert "is cancelled" in messages_of(response)


def test_a_running_row_is_left_to_its_worker(admin_client: Client, rows: dict[str, int]) -> None:
    before = snapshot()
    for op in ("retry", "cancel"):
        response = admin_client.post(row_url(rows["running"], op), follow=True)
        assert "was not changed: it is running now." in messages_of(response)
    assert snapshot() == before


def test_reschedule_from_a_rows_page(admin_client: Client, rows: dict[str, int]) -> None:
    url = row_url(rows["ready"], "reschedule")
    page = admin_client.post(url)
    assert page.status_code == 200 and b'name="delay"' in page.content
    huge = admin_client.post(url, {"dbqueue_apply": "1", "delay": "3000000", "unit": "days"})
    assert huge.status_code == 200 and b"That delay is too long" in huge.content
    assert Ticket.objects.get(pk=rows["ready"]).queue_run_at < timezone.now()
    response = admin_client.post(url, {"dbqueue_apply": "1", "delay": "2", "unit": "hours"}, follow=True)
    assert "is rescheduled" in messages_of(response)
    due = Ticket.objects.get(pk=rows["ready"]).queue_run_at - timezone.now()
    assert timedelta(minutes=119) < due <= timedelta(hours=2)


def test_row_buttons_need_the_queue_permission(rows: dict[str, int]) -> None:
    viewer = staff("viewer", "view_ticket")
    assert b"dbqueue-row-retry" not in viewer.get(change_url(rows["ready"])).content
    before = snapshot()
    for op in ("retry", "reschedule", "cancel"):
        assert (
            viewer.post(row_url(rows["ready"], op), {"dbqueue_apply": "1", "delay": "1"}).status_code == 403
        )
    assert snapshot() == before
    editor = staff("editor", "view_ticket", "change_ticket")
    assert editor.get(row_url(rows["ready"], "retry")).status_code == 405
    assert editor.post(row_url(rows["ready"], "explode")).status_code == 404
    assert editor.post(row_url(999_999, "retry")).status_code == 404


def test_hand_back_all_mine_at_once(admin_client: Client, rows: dict[str, int]) -> None:
    Ticket.queue_queryset().bulk_enqueue([{"subject": f"review {i}", "customer": 3} for i in range(12)])
    take = reverse("admin:testapp_ticket_dbqueue_take")
    admin_client.post(take + "?customer=3", {"n": "5"})  # two takes: two claims, two tokens
    admin_client.post(take + "?customer=3", {"n": "7"})
    mine = reverse("admin:testapp_ticket_dbqueue_mine")
    page = admin_client.get(mine)
    assert 'value="Hand back all 12"' in page.content.decode()
    other = staff("colleague", "view_ticket", "change_ticket")
    other.post(take + "?customer=1", {"n": "1"})  # a colleague's item stays theirs
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.post(mine, {"outcome": "release_all"}, follow=True)
    assert "Handed back 12 tickets to the queue." in messages_of(response)
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith("UPDATE")]
    assert len(writes) == 2  # one fenced UPDATE per claim, not one per item
    back = Ticket.objects.filter(customer=3)
    assert set(back.values_list("queue_state", "queue_attempts", "queue_locked_by")) == {("ready", 0, None)}
    assert (
        Ticket.objects.filter(queue_locked_by="user:colleague", queue_state=QueueState.RUNNING).count() == 1
    )
    assert admin_client.get(mine).context["items"] == []
