"""The operator admin, through the real ChangeList and the admin test client."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.contrib.messages.storage.cookie import CookieStorage
from django.db import connection
from django.test import Client, RequestFactory, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import deprecation, timezone

from django_dbqueue.admin import describe_queue_state, error_summary, pagination, stats
from django_dbqueue.models import QueueAttempt
from django_dbqueue.queue.history import AttemptOutcome
from django_dbqueue.states import QueueState
from tests.conftest import every_database
from tests.testapp.models import Job, Ticket

pytestmark = pytest.mark.django_db

URL = reverse("admin:testapp_ticket_changelist")
TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in process\nValueError: boom 42\n'
NOW = timezone.now().replace(microsecond=0)


def at(**delta: float) -> datetime:
    return NOW + timedelta(**delta)


# name: (customer, state, queue columns)
ROWS: dict[str, tuple[int, str, dict[str, Any]]] = {
    "ready": (1, QueueState.READY, {"queue_run_at": at(hours=-1), "queue_enqueued_at": at(days=-2)}),
    "retrying": (
        1,
        QueueState.READY,
        {
            "queue_attempts": 2,
            "queue_last_error": TRACEBACK,
            "queue_run_at": at(minutes=-5),
            "queue_last_attempt_at": at(minutes=-10),
        },
    ),
    "scheduled": (2, QueueState.READY, {"queue_run_at": at(days=1), "queue_priority": 5}),
    "running": (
        1,
        QueueState.RUNNING,
        {
            "queue_attempts": 1,
            "queue_locked_by": "host:1",
            "queue_token": 4242,
            # A live lease when the test runs: NOW is taken at import, and on a loaded machine
            # a test can run many minutes after collection (CI's smoke pass: 14 minutes).
            "queue_locked_until": at(hours=1),
            "queue_last_attempt_at": at(minutes=-1),
        },
    ),
    "succeeded": (2, QueueState.SUCCEEDED, {"queue_attempts": 1, "queue_finished_at": at(minutes=-30)}),
    "failed": (
        1,
        QueueState.FAILED,
        {
            "queue_attempts": 3,
            "queue_last_error": "gave up",
            "queue_finished_at": at(days=-2),
            "queue_priority": 10,
        },
    ),
    "cancelled": (2, QueueState.CANCELLED, {"queue_finished_at": at(days=-1)}),
    "idle": (1, QueueState.IDLE, {}),
}


@pytest.fixture
def rows() -> dict[str, int]:
    return make_rows()


def make_rows() -> dict[str, int]:
    """One ticket per row of ROWS; their pks by name."""
    pks = {}
    for name, (customer, state, queue) in ROWS.items():
        ticket = Ticket.objects.create(subject=f"ticket {name}", customer=customer)
        defaults = {"queue_run_at": at(hours=-2), "queue_enqueued_at": NOW}
        Ticket.objects.filter(pk=ticket.pk).update(queue_state=state, **{**defaults, **queue})
        pks[name] = ticket.pk
    return pks


def names(rows: dict[str, int], pks: Any) -> set[str]:
    by_pk = {pk: name for name, pk in rows.items()}
    return {by_pk[pk] for pk in pks}


def changelist(user: User, params: dict[str, str]) -> Any:
    request = RequestFactory().get(URL, params)
    request.user = user
    return admin.site._registry[Ticket].get_changelist_instance(request)


def split(dt: datetime) -> tuple[str, str]:
    return dt.strftime("%Y-%m-%d"), dt.strftime("%H:%M:%S")


def date_range(field: str, gte: datetime | None = None, lte: datetime | None = None) -> dict[str, str]:
    params = {}
    for name, value in (("gte", gte), ("lte", lte)):
        if value is not None:
            day, time = split(value)
            params[f"{field}__range__{name}_0"] = day
            params[f"{field}__range__{name}_1"] = time
    return params


FILTERS = [
    ({"queue_state__exact": "ready"}, {"ready", "retrying", "scheduled"}),
    ({"queue_state__exact": "failed"}, {"failed"}),
    ({"queue_has_error": "yes"}, {"retrying", "failed"}),
    ({"queue_has_error": "no"}, set(ROWS) - {"retrying", "failed"}),
    (date_range("queue_run_at", gte=at(hours=12)), {"scheduled"}),
    (date_range("queue_run_at", lte=at(minutes=-30)), set(ROWS) - {"scheduled", "retrying"}),
    (date_range("queue_enqueued_at", lte=at(days=-1)), {"ready"}),
    (date_range("queue_last_attempt_at", gte=at(minutes=-20)), {"retrying", "running"}),
    (date_range("queue_finished_at", gte=at(hours=-1)), {"succeeded"}),
    (date_range("queue_finished_at", gte=at(days=-3), lte=at(hours=-12)), {"failed", "cancelled"}),
    ({"queue_priority__range__gte": "5"}, {"scheduled", "failed"}),
    ({"queue_priority__range__lte": "0"}, set(ROWS) - {"scheduled", "failed"}),
    ({"queue_attempts__range__gte": "2", "queue_attempts__range__lte": "3"}, {"retrying", "failed"}),
]


@pytest.mark.parametrize(("params", "expected"), FILTERS)
def test_each_queue_filter_narrows_the_changelist(
    admin_user: User, rows: dict[str, int], params, expected
) -> None:
    cl = changelist(admin_user, params)
    assert names(rows, cl.queryset.values_list("pk", flat=True)) == expected
    assert names(rows, [r.pk for r in cl.result_list]) == expected


@pytest.mark.parametrize(("params", "expected"), FILTERS)
def test_queue_filters_combine_with_domain_filters(
    admin_user: User, rows: dict[str, int], params, expected
) -> None:
    customer_1 = {n for n, (customer, _s, _q) in ROWS.items() if customer == 1}
    Ticket.objects.filter(pk=rows["ready"]).update(handled=True)
    cl = changelist(admin_user, {**params, "q": "1"})  # search_fields "=customer"
    assert names(rows, [r.pk for r in cl.result_list]) == expected & customer_1
    cl = changelist(admin_user, {**params, "customer": "1", "handled__exact": "0"})
    assert names(rows, [r.pk for r in cl.result_list]) == (expected & customer_1) - {"ready"}


def test_changelist_shows_readable_queue_columns(admin_client: Client, rows: dict[str, int]) -> None:
    response = admin_client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "retrying, attempt 3 of 8" in html
    assert "ValueError: boom 42" in html and "Traceback (most recent" not in html
    assert "running by host:1, attempt 1 of 8" in html
    assert "failed after 3 attempts" in html and "scheduled" in html
    # the model admin's own columns, filters and actions are kept
    cl = response.context["cl"]
    assert list(cl.list_display[1:4]) == ["subject", "customer", "handled"]
    actions = dict(response.context["action_form"].fields["action"].choices)
    assert {"mark_handled", "dbqueue_retry_now", "dbqueue_reprioritize", "dbqueue_delete"} <= set(actions)
    assert "delete_selected" not in actions


@pytest.fixture
def django_deprecations_are_errors() -> Iterator[None]:
    """Every ``RemovedInDjango*`` warning of the installed Django release raises."""
    categories = [
        value
        for name, value in vars(deprecation).items()
        if name.startswith("RemovedIn") and isinstance(value, type) and issubclass(value, Warning)
    ]
    assert categories
    with warnings.catch_warnings():
        for category in categories:
            warnings.simplefilter("error", category)
        yield


def test_the_admin_uses_no_deprecated_django_api(
    admin_client: Client, rows: dict[str, int], django_deprecations_are_errors: None
) -> None:
    # Django 6.1 asks get_actions() for the change list's and the change form's actions and
    # warns (RemovedInDjango2028Warning) about an override without ``action_location``.
    response = admin_client.get(URL)
    assert response.status_code == 200
    actions = dict(response.context["action_form"].fields["action"].choices)
    assert {"mark_handled", "dbqueue_retry_now", "dbqueue_delete"} <= set(actions)
    assert "delete_selected" not in actions
    change = admin_client.get(reverse("admin:testapp_ticket_change", args=[rows["retrying"]]))
    assert change.status_code == 200


@pytest.mark.skipif(not hasattr(admin, "ActionLocation"), reason="change form actions arrived in Django 6.1")
def test_change_form_actions_of_the_model_admin_are_kept(
    admin_user: User, django_deprecations_are_errors: None
) -> None:
    from tests.testapp.admin import TicketAdmin

    both = [admin.ActionLocation.CHANGE_LIST, admin.ActionLocation.CHANGE_FORM]

    @admin.action(description="Escalate", location=both)
    def escalate(modeladmin: Any, request: Any, queryset: Any) -> None:
        pass

    class EscalatingAdmin(TicketAdmin):
        actions = ("mark_handled", escalate)

    model_admin = EscalatingAdmin(Ticket, admin.site)
    request = RequestFactory().get(URL)
    request.user = admin_user
    on_form = model_admin.get_actions(request, action_location=admin.ActionLocation.CHANGE_FORM)
    assert set(on_form) == {"escalate"}
    on_list = model_admin.get_actions(request, action_location=admin.ActionLocation.CHANGE_LIST)
    assert {"escalate", "mark_handled", "dbqueue_retry_now", "dbqueue_delete"} <= set(on_list)
    assert "delete_selected" not in on_list
    choices = model_admin.get_action_choices(request, action_location=admin.ActionLocation.CHANGE_FORM)
    assert [name for name, _label in choices if name] == ["escalate"]


def test_error_summary_and_state_text() -> None:
    assert error_summary(TRACEBACK) == "ValueError: boom 42"
    assert error_summary("first line\nsecond") == "first line"
    assert error_summary("") == ""
    job = Job(queue_state=QueueState.READY, queue_attempts=1, queue_last_error="x", queue_run_at=NOW)
    assert describe_queue_state(job) == "retrying, attempt 2 of 3"


# -- actions ---------------------------------------------------------------------------------


def snapshot() -> dict[int, tuple]:
    fields = ("queue_state", "queue_priority", "queue_run_at", "queue_attempts", "queue_token")
    return {row[0]: row[1:] for row in Ticket.objects.values_list("pk", *fields)}


def post_action(client: Client, action: str, pks: list[int], query: str = "", **extra: Any) -> Any:
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], "select_across": "0", **extra}
    if "dbqueue_apply" not in extra:
        data["index"] = "0"
    return client.post(URL + query, data, follow=True)


ACTIONS = [
    ("dbqueue_retry_now", {}, {"ready", "retrying", "scheduled", "failed"}),
    ("dbqueue_reprioritize", {"priority": "7"}, set(ROWS) - {"running"}),
    ("dbqueue_reschedule", {"delay": "2", "unit": "hours"}, {"ready", "retrying", "scheduled"}),
    ("dbqueue_cancel", {}, {"ready", "retrying", "scheduled", "idle"}),
    ("dbqueue_enqueue_again", {}, {"succeeded", "failed", "cancelled", "idle"}),
    ("dbqueue_delete", {}, set(ROWS) - {"running"}),
]
FORM_ACTIONS = {"dbqueue_reprioritize", "dbqueue_reschedule", "dbqueue_delete"}


@pytest.mark.parametrize(("action", "form", "expected"), ACTIONS)
def test_action_changes_exactly_the_rows_it_should(
    admin_client: Client, rows: dict[str, int], action: str, form: dict[str, str], expected: set[str]
) -> None:
    before = snapshot()
    pks = list(rows.values())
    if action in FORM_ACTIONS:
        page = post_action(admin_client, action, pks)
        assert page.status_code == 200 and b"dbqueue-action-form" in page.content
        assert snapshot() == before  # the intermediate page changes nothing
        response = post_action(admin_client, action, pks, dbqueue_apply="1", **form)
    else:
        response = post_action(admin_client, action, pks)
    after = snapshot()
    changed = {pk for pk in before if after.get(pk) != before[pk]}
    assert names(rows, changed) == expected
    assert after[rows["running"]] == before[rows["running"]]
    text = " ".join(str(m) for m in get_messages(response.wsgi_request))
    assert f"{len(expected)} of 8 selected tickets" in text
    assert "1 running row was left to its worker" in text


def test_action_results_are_what_the_queue_api_promises(admin_client: Client, rows: dict[str, int]) -> None:
    post_action(admin_client, "dbqueue_retry_now", [rows["failed"], rows["scheduled"]])
    failed = Ticket.objects.get(pk=rows["failed"])
    assert (failed.queue_state, failed.queue_attempts) == (QueueState.READY, 0)
    assert Ticket.objects.get(pk=rows["scheduled"]).queue_run_at <= timezone.now()
    post_action(
        admin_client, "dbqueue_reschedule", [rows["ready"]], dbqueue_apply="1", run_at="2031-05-04T03:02"
    )
    assert Ticket.objects.get(pk=rows["ready"]).queue_run_at == datetime(2031, 5, 4, 3, 2, tzinfo=NOW.tzinfo)


def test_reschedule_form_needs_exactly_one_target(admin_client: Client, rows: dict[str, int]) -> None:
    before = snapshot()
    response = post_action(admin_client, "dbqueue_reschedule", [rows["ready"]], dbqueue_apply="1")
    assert response.status_code == 200 and b"Give a date and time, or a delay." in response.content
    assert b"not both" not in response.content
    both = {"delay": "2", "unit": "hours", "run_at": "2031-05-04T03:02"}
    response = post_action(admin_client, "dbqueue_reschedule", [rows["ready"]], dbqueue_apply="1", **both)
    assert response.status_code == 200 and b"either a date and time or a delay, not both" in response.content
    assert snapshot() == before


def _direct_request(admin_user: User, data: dict[str, Any]) -> Any:
    request = RequestFactory().post(URL, data)
    request.user = admin_user
    request._messages = CookieStorage(request)
    return request


@pytest.mark.parametrize(("action", "form", "expected"), ACTIONS)
def test_each_action_is_one_statement(
    admin_user: User, rows: dict[str, int], action: str, form: dict[str, str], expected: set[str]
) -> None:
    selected = [rows[name] for name in expected]
    data = {"_selected_action": [str(pk) for pk in selected], "select_across": "0", "action": action}
    if action in FORM_ACTIONS:
        data.update(dbqueue_apply="1", **form)
    request = _direct_request(admin_user, data)
    model_admin = admin.site._registry[Ticket]
    queryset = Ticket.objects.filter(pk__in=selected)
    with CaptureQueriesContext(connection) as queries:
        getattr(model_admin, action)(request, queryset)
    # (On PostgreSQL, retry and enqueue also wake listening workers with a NOTIFY after
    # the commit: a signal, not a statement over the rows.)
    statements = [q["sql"] for q in queries.captured_queries if "pg_notify" not in q["sql"]]
    if action == "dbqueue_cancel":
        # A cancel first locks the rows in a batch or with dependants, to tell them in its
        # transaction (docs/composition.md): one SELECT, then the one UPDATE.
        assert "queue_dependants" in statements[0] and statements[0].lstrip().startswith("SELECT")
        statements = statements[1:]
    assert len(statements) == 1, statements
    verb = "DELETE" if action == "dbqueue_delete" else "UPDATE"
    assert statements[0].lstrip().upper().startswith(verb)


def select_all(client: Client, query: str, action: str, pk: int, **form: str) -> tuple[Any, Any]:
    """ "Select all" as a person does it: the confirmation page, then confirm the number it
    shows. Returns both responses."""
    data = {"action": action, "_selected_action": [str(pk)], "select_across": "1", "index": "0"}
    page = client.post(URL + query, data)
    assert page.status_code == 200 and b"dbqueue-action-form" in page.content
    expected = page.context["expected"]
    data = {**data, "dbqueue_apply": "1", "dbqueue_expected": str(expected), **form}
    del data["index"]
    return page, client.post(URL + query, data, follow=True)


def test_select_all_respects_the_filter(admin_client: Client, rows: dict[str, int]) -> None:
    before = snapshot()
    with CaptureQueriesContext(connection) as queries:
        page, response = select_all(admin_client, "?customer=2", "dbqueue_retry_now", rows["scheduled"])
    assert "exactly 1 ticket" in page.context["summary"]
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith("UPDATE")]
    assert len([w for w in writes if "testapp_ticket" in w]) == 1, writes
    after = snapshot()
    assert names(rows, {pk for pk in before if after[pk] != before[pk]}) == {"scheduled"}
    text = " ".join(str(m) for m in get_messages(response.wsgi_request))
    assert "1 tickets matching the filter" in text


def test_select_all_with_a_date_range_reprioritises_only_that_range(
    admin_client: Client, rows: dict[str, int]
) -> None:
    query = "?" + "&".join(f"{k}={v}" for k, v in date_range("queue_finished_at", gte=at(days=-3)).items())
    page, _response = select_all(admin_client, query, "dbqueue_reprioritize", rows["failed"], priority="-3")
    assert page.context["expected"] == 3
    changed = set(Ticket.objects.filter(queue_priority=-3).values_list("pk", flat=True))
    assert names(rows, changed) == {"succeeded", "failed", "cancelled"}


# -- permissions -----------------------------------------------------------------------------


def staff(username: str, *codenames: str) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="testapp", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def test_view_only_staff_sees_no_action_and_a_forged_post_is_refused(rows: dict[str, int]) -> None:
    client = staff("viewer", "view_ticket")
    response = client.get(URL)
    assert response.status_code == 200
    assert response.context["action_form"] is None or not any(
        name.startswith("dbqueue") for name, _ in response.context["action_form"].fields["action"].choices
    )
    assert b"dbqueue-take-form" not in response.content
    before = snapshot()
    for action in ("dbqueue_retry_now", "dbqueue_cancel", "dbqueue_delete"):
        forged = post_action(client, action, list(rows.values()))
        assert forged.status_code == 403
    forged = post_action(client, "dbqueue_reprioritize", list(rows.values()), dbqueue_apply="1", priority="9")
    assert forged.status_code == 403
    take = client.post(reverse("admin:testapp_ticket_dbqueue_take"), {"n": "3"})
    assert take.status_code == 403
    assert client.get(reverse("admin:testapp_ticket_dbqueue_mine")).status_code == 403
    assert snapshot() == before
    assert client.get(reverse("admin:testapp_ticket_dbqueue_dashboard")).status_code == 200


def test_change_permission_without_delete_permission(rows: dict[str, int]) -> None:
    client = staff("editor", "view_ticket", "change_ticket")
    response = client.get(URL)
    actions = dict(response.context["action_form"].fields["action"].choices)
    assert "dbqueue_retry_now" in actions and "dbqueue_delete" not in actions
    forged = post_action(client, "dbqueue_delete", [rows["ready"]], dbqueue_apply="1")
    assert forged.status_code == 403
    assert Ticket.objects.filter(pk=rows["ready"]).exists()
    post_action(client, "dbqueue_cancel", [rows["ready"]])
    assert Ticket.objects.get(pk=rows["ready"]).queue_state == QueueState.CANCELLED


def test_no_staff_no_admin(rows: dict[str, int]) -> None:
    user = User.objects.create_user("nobody", password="pw")
    client = Client()
    client.force_login(user)
    response = client.post(
        URL, {"action": "dbqueue_retry_now", "_selected_action": [str(rows["ready"])], "index": 0}
    )
    assert response.status_code == 302  # to the login page
    assert Ticket.objects.get(pk=rows["ready"]).queue_run_at == at(hours=-1)


# -- change form -----------------------------------------------------------------------------


def test_queue_columns_are_read_only_and_the_traceback_is_shown(
    admin_client: Client, rows: dict[str, int]
) -> None:
    url = reverse("admin:testapp_ticket_change", args=[rows["retrying"]])
    response = admin_client.get(url)
    html = response.content.decode()
    assert 'name="subject"' in html and 'name="customer"' in html
    assert 'name="queue_priority"' not in html and 'name="queue_state"' not in html
    assert '<pre class="dbqueue-traceback">Traceback (most recent call last):' in html
    before = snapshot()[rows["retrying"]]
    response = admin_client.post(
        url, {"subject": "edited", "customer": "9", "queue_priority": "99", "queue_state": "succeeded"}
    )
    assert response.status_code == 302
    row = Ticket.objects.get(pk=rows["retrying"])
    assert (row.subject, row.customer) == ("edited", 9)
    assert snapshot()[rows["retrying"]] == before


def test_editing_a_running_row_keeps_the_claim(admin_client: Client, rows: dict[str, int]) -> None:
    url = reverse("admin:testapp_ticket_change", args=[rows["running"]])
    admin_client.post(url, {"subject": "edited while running", "customer": "1"})
    row = Ticket.objects.get(pk=rows["running"])
    assert (row.subject, row.queue_state, row.queue_token) == (
        "edited while running",
        QueueState.RUNNING,
        4242,
    )


# -- dashboard -------------------------------------------------------------------------------


def attempt(pk: int, n: int, outcome: str, minutes_ago: float, error: str = "") -> QueueAttempt:
    finished = timezone.now() - timedelta(minutes=minutes_ago)
    return QueueAttempt.objects.create(
        model="testapp.Ticket",
        object_id=str(pk),
        attempt=n,
        worker_id="host:1",
        claimed_at=finished - timedelta(seconds=2),
        finished_at=finished,
        outcome=outcome,
        error=error,
    )


def test_dashboard_counts(admin_client: Client, rows: dict[str, int]) -> None:
    attempt(rows["succeeded"], 1, AttemptOutcome.SUCCEEDED, 5)
    attempt(rows["retrying"], 1, AttemptOutcome.RETRIED, 20, TRACEBACK)
    attempt(rows["retrying"], 2, AttemptOutcome.RETRIED, 10, TRACEBACK)
    attempt(rows["failed"], 3, AttemptOutcome.FAILED, 60 * 24 * 2, "gave up")
    response = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard"))
    assert response.status_code == 200
    stats = response.context["stats"]
    counts = {state: n for state, _label, n, _estimated in stats["counts"]}
    assert counts == {"idle": 1, "ready": 3, "running": 1, "succeeded": 1, "failed": 1, "cancelled": 1}
    assert stats["total"] == 8
    # from the attempt history
    assert (stats["succeeded_last_hour"], stats["failed_last_hour"], stats["retried_last_hour"]) == (1, 0, 2)
    assert stats["workers"] == [("host:1", 1)] and stats["people"] == []
    assert timedelta(minutes=59) < stats["oldest_ready_age"] < timedelta(hours=2)


def test_dashboard_lists_live_workers_from_the_registry(admin_client: Client, rows: dict[str, int]) -> None:
    from django_dbqueue.models import WorkerProcess
    from django_dbqueue.worker import registry

    registry.register("host:1", [Ticket], "default")
    registry.register("host:2", [Ticket, Job], "default")
    registry.register("host:3", [Job], "default")
    WorkerProcess.objects.create(
        worker_id="host:dead",
        hostname="h",
        pid=1,
        queue_models="testapp.Ticket",
        started_at=timezone.now() - timedelta(days=1),
        last_seen_at=timezone.now() - timedelta(hours=1),
    )
    admin_client.post(reverse("admin:testapp_ticket_dbqueue_take") + "?customer=1", {"n": "1"})
    stats = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard")).context["stats"]
    assert stats["workers"] == [("host:1", 1), ("host:2", 0)]
    assert stats["people"] == [("admin", 1)]
    assert admin_client.get(reverse("admin:django_dbqueue_workerprocess_changelist")).status_code == 200


@override_settings(DBQUEUE_HISTORY=False)
def test_dashboard_without_history_reads_finished_at(admin_client: Client, rows: dict[str, int]) -> None:
    Ticket.objects.filter(pk=rows["succeeded"]).update(
        queue_finished_at=timezone.now() - timedelta(minutes=5)
    )
    Ticket.objects.filter(pk=rows["failed"]).update(queue_finished_at=timezone.now() - timedelta(minutes=50))
    response = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard"))
    stats = response.context["stats"]
    assert (stats["succeeded_last_hour"], stats["failed_last_hour"], stats["retried_last_hour"]) == (
        1,
        1,
        None,
    )


def test_change_form_shows_the_attempt_history(admin_client: Client, rows: dict[str, int]) -> None:
    attempt(rows["retrying"], 1, AttemptOutcome.RETRIED, 20, TRACEBACK)
    attempt(
        rows["retrying"], 2, AttemptOutcome.RETRIED, 10, "Traceback (most recent call last):\nKeyError: 'sku'"
    )
    attempt(rows["ready"], 1, AttemptOutcome.SUCCEEDED, 10)
    html = admin_client.get(reverse("admin:testapp_ticket_change", args=[rows["retrying"]])).content.decode()
    assert 'class="dbqueue-history"' in html
    assert html.count("Failed, retried later") == 2 and "Succeeded" not in html.split("dbqueue-history")[1]
    history = html.split('class="dbqueue-history"')[1]
    assert history.index("KeyError: &#x27;sku&#x27;") < history.index("ValueError: boom 42")  # newest first


def test_dashboard_stays_bounded_on_big_tables(
    admin_client: Client, rows: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stats, "table_row_estimate", lambda model, using: 5_000_000)
    big = stats.queue_stats(Ticket, exact_limit=2)
    ready = next(c for c in big["counts"] if c[0] == "ready")
    assert ready[2] >= 3 and ready[3] is True and big["total_estimated"]
    assert big["succeeded_last_hour"] == 0  # from the attempt history, at any size
    # without history and without an index on (queue_state, queue_finished_at) the "last
    # hour" scan of the queue table is skipped
    assert not stats.has_index(Ticket, "default", stats.FINISHED_INDEX)
    with override_settings(DBQUEUE_HISTORY=False):
        assert stats.queue_stats(Ticket)["succeeded_last_hour"] is None
        response = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard"))
    assert b"add an index on (queue_state, queue_finished_at)" in response.content
    monkeypatch.setattr(stats, "EXACT_LIMIT", 2)
    response = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard"))
    assert b'data-state="ready">\xe2\x89\x88 ' in response.content  # the estimated count: "≈ 5"
    assert b'id="dbqueue-estimates"' in response.content
    assert stats.has_index(Ticket, "default", ("queue_state",))  # the claim index


# -- people as consumers ---------------------------------------------------------------------


def my_items(client: Client) -> list[Ticket]:
    return list(client.get(reverse("admin:testapp_ticket_dbqueue_mine")).context["items"])


def outcome(client: Client, item: Ticket, outcome: str, **extra: str) -> Any:
    data = {"pk": str(item.pk), "token": str(item.queue_token), "outcome": outcome, **extra}
    return client.post(reverse("admin:testapp_ticket_dbqueue_mine"), data, follow=True)


def test_take_the_next_items_of_the_filtered_list(admin_client: Client, rows: dict[str, int]) -> None:
    take = reverse("admin:testapp_ticket_dbqueue_take")
    response = admin_client.post(take + "?customer=1", {"n": "5"}, follow=True)
    assert response.status_code == 200
    mine = my_items(admin_client)
    # due READY rows of customer 1 only; highest priority first, the running row untouched
    assert names(rows, [t.pk for t in mine]) == {"ready", "retrying"}
    for ticket in Ticket.objects.filter(pk__in=[t.pk for t in mine]):
        assert ticket.queue_state == QueueState.RUNNING and ticket.queue_locked_by == "user:admin"
        assert ticket.queue_locked_until > timezone.now() + timedelta(minutes=50)
    assert Ticket.objects.get(pk=rows["running"]).queue_locked_by == "host:1"
    assert b"My items (2)" in admin_client.get(URL).content
    # a runqueue worker does not get them any more
    assert not [r for r in Ticket.queue_queryset().claim(10) if r.pk in (rows["ready"], rows["retrying"])]


def test_done_failed_defer_and_hand_back(admin_client: Client, rows: dict[str, int]) -> None:
    Ticket.objects.filter(pk=rows["scheduled"]).update(queue_run_at=at(hours=-3))
    Ticket.objects.filter(pk=rows["idle"]).update(queue_state=QueueState.READY)
    admin_client.post(reverse("admin:testapp_ticket_dbqueue_take"), {"n": "4"})
    items = {t.pk: t for t in my_items(admin_client)}
    assert names(rows, items) == {"ready", "retrying", "scheduled", "idle"}
    outcome(admin_client, items[rows["ready"]], "done")
    outcome(admin_client, items[rows["retrying"]], "failed", note="customer unreachable")
    outcome(admin_client, items[rows["scheduled"]], "defer", defer_until="2030-01-02T03:04")
    outcome(admin_client, items[rows["idle"]], "release")
    done, failed, deferred, released = (
        Ticket.objects.get(pk=rows[n]) for n in ("ready", "retrying", "scheduled", "idle")
    )
    assert done.queue_state == QueueState.SUCCEEDED
    assert (
        failed.queue_state == QueueState.FAILED
        and "customer unreachable (user:admin)" in failed.queue_last_error
    )
    assert (deferred.queue_state, deferred.queue_attempts) == (QueueState.READY, 0)
    assert deferred.queue_run_at == datetime(2030, 1, 2, 3, 4, tzinfo=NOW.tzinfo)
    assert (released.queue_state, released.queue_attempts, released.queue_locked_by) == (
        QueueState.READY,
        0,
        None,
    )
    assert my_items(admin_client) == []


def test_an_outcome_needs_a_live_claim_of_ones_own(admin_client: Client, rows: dict[str, int]) -> None:
    admin_client.post(reverse("admin:testapp_ticket_dbqueue_take") + "?customer=1", {"n": "1"})
    [item] = my_items(admin_client)
    other = staff("colleague", "view_ticket", "change_ticket")
    response = outcome(other, item, "done")
    assert "no longer yours" in response.content.decode()
    assert Ticket.objects.get(pk=item.pk).queue_state == QueueState.RUNNING
    # the lease ran out and a worker's rescue gave the row back: the late outcome is refused
    Ticket.objects.filter(pk=item.pk).update(queue_locked_until=timezone.now() - timedelta(seconds=1))
    assert Ticket.queue_queryset().rescue_expired() == 1
    response = outcome(admin_client, item, "done")
    assert "no longer yours" in response.content.decode()
    assert Ticket.objects.get(pk=item.pk).queue_state == QueueState.READY


def test_take_without_anything_ready(admin_client: Client) -> None:
    response = admin_client.post(reverse("admin:testapp_ticket_dbqueue_take"), {"n": "3"}, follow=True)
    assert "Nothing is ready" in response.content.decode()
    assert admin_client.get(reverse("admin:testapp_ticket_dbqueue_take")).status_code == 405


# -- big tables ------------------------------------------------------------------------------


def test_no_count_star_on_a_big_unfiltered_list(
    admin_client: Client, rows: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pagination, "table_row_estimate", lambda model, using: 1_000_000)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL)
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    # Allowed: the count of "My items" and the bounded count of RUNNING rows before it
    # (``LIMIT 1001``, the state index alone).
    ticket_counts = [
        c for c in counts if "testapp_ticket" in c and "queue_locked_by" not in c and "LIMIT 1001" not in c
    ]
    assert ticket_counts == []
    cl = response.context["cl"]
    assert cl.result_count == 1_000_000 and cl.paginator.estimated
    assert b"dbqueue-estimate" in response.content


def test_filtered_lists_count_exactly_up_to_the_limit(
    admin_user: User, rows: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pagination.EstimatedCountPaginator, "exact_limit", 2)
    cl = changelist(admin_user, {"queue_state__exact": "failed"})
    assert (cl.result_count, cl.paginator.estimated) == (1, False)
    cl = changelist(admin_user, {"queue_has_error": "no"})
    assert cl.paginator.estimated and cl.result_count >= 3
    assert len(cl.result_list) == 6


def test_the_mixin_works_on_a_model_with_a_plain_manager(admin_client: Client) -> None:
    job = Job.objects.create(name="plain")
    url = reverse("admin:testapp_job_changelist")
    assert admin_client.get(url).status_code == 200
    admin_client.post(url, {"action": "dbqueue_cancel", "_selected_action": [str(job.pk)], "index": "0"})
    assert Job.objects.get(pk=job.pk).queue_state == QueueState.CANCELLED


def test_the_apps_own_models_have_admins(admin_client: Client) -> None:
    from django_dbqueue.models import Message

    published = Message.objects.publish("email.send", {"to": "a@example.com"}, key="welcome:1")
    message = Message.objects.get(kind="email.send")
    url = reverse("admin:django_dbqueue_message_changelist")
    response = admin_client.get(url, {"q": "email.send"})
    assert response.status_code == 200 and [m.pk for m in response.context["cl"].result_list] == [message.pk]
    admin_client.post(url, {"action": "dbqueue_cancel", "_selected_action": [str(message.pk)], "index": "0"})
    assert Message.objects.get(pk=message.pk).queue_state == QueueState.CANCELLED
    attempt(message.pk, 1, AttemptOutcome.SUCCEEDED, 1)
    for name in ("queueattempt", "archivedmessage", "taskrecord"):
        assert admin_client.get(reverse(f"admin:django_dbqueue_{name}_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:django_dbqueue_queueattempt_add")).status_code == 403
    assert published is not None


@every_database("table_row_estimate and plan_row_estimate are backend methods, None on SQLite")
def test_database_estimates(rows: dict[str, int]) -> None:
    estimate = pagination.table_row_estimate(Ticket, "default")
    planned = pagination.plan_row_estimate(Ticket.objects.filter(queue_state="ready"))
    if connection.vendor == "sqlite":
        assert estimate is None and planned is None
    else:
        # statistics may be stale (0 or -1 before ANALYZE): a number or None, never an error
        assert estimate is None or estimate >= 0
        assert isinstance(planned, int) and planned >= 0
