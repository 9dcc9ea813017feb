"""The Schedule admin: list, edit with validation (an override code keeps), actions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_dbqueue.models import Message, Schedule, ScheduleFiring
from django_dbqueue.schedules import sync

pytestmark = pytest.mark.django_db
LIST = "/admin/django_dbqueue/schedule/"
DECLARED = {"digest": {"message": "test.echo", "cron": "0 * * * *", "timezone": "UTC"}}


@pytest.fixture
def digest() -> Schedule:
    with override_settings(DBQUEUE_SCHEDULES=DECLARED):
        sync()
    return Schedule.objects.get(name="digest")


def change(client: Any, row: Schedule, **data: Any) -> Any:
    form = {"cron": row.cron, "every": "", "timezone": row.timezone, "enabled": "on" if row.enabled else ""}
    form.update(data)
    return client.post(f"{LIST}{row.pk}/change/", {k: v for k, v in form.items() if v != ""})


def test_the_list_shows_next_due_and_origin(admin_client: Any, digest: Schedule) -> None:
    page = admin_client.get(LIST)
    assert page.status_code == 200
    text = page.content.decode()
    assert "digest" in text and "0 * * * * (UTC)" in text and ">code<" in text


def test_an_edited_cron_line_is_validated_and_kept_as_an_override(
    admin_client: Any, digest: Schedule
) -> None:
    bad = change(admin_client, digest, cron="99 * * * *")
    assert bad.status_code == 200 and "Bad minute" in bad.content.decode()
    digest.refresh_from_db()
    assert digest.cron == "0 * * * *"
    ok = change(admin_client, digest, cron="*/5 * * * *")
    assert ok.status_code == 302
    digest.refresh_from_db()
    assert digest.cron == "*/5 * * * *" and digest.overrides == ["cron"]
    # Its next slot is the new timing's first after the edit (at most five minutes away).
    assert timezone.now() < digest.next_due <= timezone.now() + timedelta(minutes=5)
    with override_settings(DBQUEUE_SCHEDULES=DECLARED):  # the next deploy: the override stays
        sync()
    digest.refresh_from_db()
    assert digest.cron == "*/5 * * * *"
    admin_client.post(LIST, {"action": "revert", "_selected_action": [digest.pk]})
    digest.refresh_from_db()
    assert digest.cron == "0 * * * *" and digest.overrides == []


def test_an_unknown_time_zone_is_refused(admin_client: Any, digest: Schedule) -> None:
    page = change(admin_client, digest, timezone="Mars/Olympus")
    assert page.status_code == 200 and "unknown time zone" in page.content.decode()


def test_enable_disable_and_run_now(admin_client: Any, digest: Schedule) -> None:
    admin_client.post(LIST, {"action": "disable", "_selected_action": [digest.pk]})
    digest.refresh_from_db()
    assert not digest.enabled and digest.overrides == ["enabled"]
    admin_client.post(LIST, {"action": "enable", "_selected_action": [digest.pk]})
    digest.refresh_from_db()
    assert digest.enabled and digest.next_due > timezone.now()
    next_due = digest.next_due
    admin_client.post(LIST, {"action": "run_now", "_selected_action": [digest.pk]})
    firing = ScheduleFiring.objects.get()
    assert firing.manual and firing.fired_by == "admin:admin"
    assert firing.job == f"django_dbqueue.Message:{Message.objects.get().pk}"
    digest.refresh_from_db()
    assert digest.next_due == next_due
    assert admin_client.get("/admin/django_dbqueue/schedulefiring/").status_code == 200


def test_a_schedule_added_in_the_admin_needs_a_usable_target(admin_client: Any) -> None:
    form = {"name": "adhoc", "every": "60", "timezone": "UTC", "catch_up": "all", "catch_up_limit": "0",
            "enabled": "on", "target": "message:no.such", "arguments": "{}", "priority": "0"}  # fmt: skip
    page = admin_client.post(f"{LIST}add/", form)
    # Not a target code allows: the field offers code's targets only.
    assert page.status_code == 200 and "Select a valid choice" in page.content.decode()
    assert not Schedule.objects.exists()
    page = admin_client.post(f"{LIST}add/", {**form, "target": "message:test.echo"})
    assert page.status_code == 200 and "greater than or equal to 1" in page.content.decode()
    page = admin_client.post(f"{LIST}add/", {**form, "target": "message:test.echo", "catch_up_limit": "10"})
    assert page.status_code == 302
    row = Schedule.objects.get()
    assert not row.in_code and row.next_due is not None
