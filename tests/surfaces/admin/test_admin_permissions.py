"""Every admin path the package ships obeys Django's permissions, and stored or typed text
never chooses code (issue 34).

The matrix at the end discovers the package's admins, their URLs, actions and row buttons
from the admin site, and forges each as six kinds of user: a new action or URL that forgets
its permissions makes it fail. The tests before it forge the attacks the issue reported.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import models, transaction
from django.test import Client, RequestFactory, override_settings
from django.urls import URLPattern, reverse

from django_dbqueue.admin import QueueAdminMixin
from django_dbqueue.admin.rows import ROW_OPERATIONS
from django_dbqueue.composition import batch
from django_dbqueue.models import Batch, Message, QueueAttempt, Schedule, TaskRecord
from django_dbqueue.schedules import fire_due
from django_dbqueue.states import QueueState
from tests.testapp.models import Job, Ticket

pytestmark = pytest.mark.django_db
CANARY = "tests.testapp.import_canary"
needs_tasks = pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0")


def staff(username: str, *perms: str) -> Client:
    """A logged-in staff user with exactly ``perms`` (``app_label.codename``); csrf checks off."""
    user = User.objects.create_user(username, is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def action(client: Client, model: type[models.Model], name: str, pks: list[Any], **extra: Any) -> Any:
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return client.post(
        url, {"action": name, ACTION_CHECKBOX_NAME: [str(pk) for pk in pks], "index": 0, **extra}
    )


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def no_canary() -> Iterator[None]:
    sys.modules.pop(CANARY, None)
    yield
    assert CANARY not in sys.modules, "text from a form or a row was imported as code"


# -- 1. the Batch admin's Cancel -----------------------------------------------------------------


def job_batch() -> tuple[Batch, Job]:
    with batch(description="nightly") as opened:
        job = Job.objects.create(name="in a batch")
    return Batch.objects.get(pk=opened.pk), job


def test_a_view_only_user_cannot_cancel_a_batch() -> None:
    opened, job = job_batch()
    client = staff("viewer", "django_dbqueue.view_batch")
    action(client, Batch, "cancel_batches", [opened.pk])
    job.refresh_from_db()
    opened.refresh_from_db()
    assert job.queue_state == QueueState.READY and opened.cancelled_at is None


def test_cancelling_a_batch_needs_change_on_its_member_models() -> None:
    opened, job = job_batch()
    client = staff("batcher", "django_dbqueue.view_batch", "django_dbqueue.change_batch")
    response = action(client, Batch, "cancel_batches", [opened.pk])
    assert any("not cancelled: you may not change jobs" in text for text in texts(response))
    job.refresh_from_db()
    opened.refresh_from_db()
    assert job.queue_state == QueueState.READY and opened.cancelled_at is None
    client = staff("jobs", "django_dbqueue.view_batch", "django_dbqueue.change_batch", "testapp.change_job")
    action(client, Batch, "cancel_batches", [opened.pk])
    job.refresh_from_db()
    assert job.queue_state == QueueState.CANCELLED


# -- 2. the Schedule admin: code's targets only, the target model's add permission ----------------

SCHEDULE_ADD = "/admin/django_dbqueue/schedule/add/"


def schedule_form(target: str, arguments: str = "{}", **extra: str) -> dict[str, str]:
    form = {"name": "adhoc", "every": "60", "timezone": "UTC", "catch_up": "latest", "catch_up_limit": "10",
            "enabled": "on", "target": target, "arguments": arguments, "priority": "0"}  # fmt: skip
    return {**form, **extra}


def test_the_schedule_admin_runs_no_typed_target_and_imports_nothing(
    admin_client: Client, no_canary: None
) -> None:
    for target in (f"task:{CANARY}.thing", "model:testapp.Ticket", "message:test.slow"):
        page = admin_client.post(SCHEDULE_ADD, schedule_form(target))
        assert page.status_code == 200 and "Select a valid choice" in page.text, target
    assert not Schedule.objects.exists()
    # A row edited by hand (or written before the allowlist) fires nothing and imports nothing.
    row = Schedule.objects.create(name="forged", every=60, target=f"task:{CANARY}.thing")
    response = action(admin_client, Schedule, "run_now", [row.pk])
    assert any("is not declared in code" in text for text in texts(response))
    Schedule.objects.filter(pk=row.pk).update(next_due="2000-01-01T00:00:00Z")
    assert fire_due(fired_by="test") == 0
    row.refresh_from_db()
    assert "is not declared in code" in row.last_error
    assert not TaskRecord.objects.exists()


def test_a_model_target_needs_the_add_permission_of_its_model() -> None:
    schedules = ("view_schedule", "add_schedule", "change_schedule")
    client = staff("scheduler", *(f"django_dbqueue.{codename}" for codename in schedules))
    arguments = '{"fields": {"name": "scheduled"}}'
    page = client.post(SCHEDULE_ADD, schedule_form("model:testapp.Job", arguments))
    assert page.status_code == 200 and "you may not add jobs" in page.text
    assert not Schedule.objects.exists()
    row = Schedule.objects.create(name="jobs", every=60, target="model:testapp.Job", arguments={"fields": {}})
    response = action(client, Schedule, "run_now", [row.pk])
    assert any("you may not add jobs" in text for text in texts(response))
    assert not Job.objects.exists()
    client = staff("job-adder", *(f"django_dbqueue.{c}" for c in schedules), "testapp.add_job")
    page = client.post(SCHEDULE_ADD, schedule_form("model:testapp.Job", arguments))
    assert page.status_code == 302
    action(client, Schedule, "run_now", [Schedule.objects.get(name="adhoc").pk])
    assert Job.objects.get().name == "scheduled"


def test_a_model_targets_fields_go_through_full_clean(admin_client: Client) -> None:
    for fields, error in (
        ({"queue_state": "succeeded"}, "is not a field a schedule may set"),
        ({"name": "x" * 101}, "at most 100 characters"),
        ({"fail_times": "many"}, "must be an integer"),
    ):
        arguments = json.dumps({"fields": fields})
        page = admin_client.post(SCHEDULE_ADD, schedule_form("model:testapp.Job", arguments))
        assert page.status_code == 200 and error in page.text, fields
    assert not Schedule.objects.exists()


def test_a_message_targets_queue_is_checked_as_publish_checks_it(admin_client: Client) -> None:
    page = admin_client.post(SCHEDULE_ADD, schedule_form("message:test.echo", '{"queue": "no such queue!"}'))
    assert page.status_code == 200 and "use 1-64 letters" in page.text
    assert not Schedule.objects.exists()


@needs_tasks
def test_the_worker_runs_only_registered_tasks_and_imports_no_stored_path(no_canary: None) -> None:
    from django_dbqueue.testing import run_queue_until_empty

    record = TaskRecord.objects.create(task_path=f"{CANARY}.thing")
    run_queue_until_empty(TaskRecord)
    record.refresh_from_db()
    assert record.queue_state == QueueState.FAILED
    assert "not a registered django.tasks Task" in record.queue_last_error


# -- 3. the TaskRecord and Message change forms ----------------------------------------------------


@needs_tasks
def test_a_task_records_enqueued_call_is_read_only(admin_client: Client) -> None:
    from tests.testapp import tasks

    result = tasks.add.enqueue(1, 2)
    url = f"/admin/django_dbqueue/taskrecord/{result.id}/change/"
    forged = {"task_path": "tests.testapp.tasks.explode", "args": "[]", "kwargs": '{"reason": "edited"}',
              "takes_context": "on", "backend": "other", "queue": "other"}  # fmt: skip
    admin_client.post(url, forged)
    record = TaskRecord.objects.get(pk=result.id)
    assert (
        record.task_path,
        record.args,
        record.kwargs,
        record.takes_context,
        record.backend,
        record.queue,
    ) == ("tests.testapp.tasks.add", [1, 2], {}, False, "default", "default")
    assert admin_client.get("/admin/django_dbqueue/taskrecord/add/").status_code == 403


def test_a_messages_call_is_read_only_and_its_queue_is_validated(admin_client: Client) -> None:
    published = Message.objects.publish("test.echo", {"n": 1})
    assert published is not None
    message = published.message
    url = f"/admin/django_dbqueue/message/{message.pk}/change/"
    forged = {"kind": "test.fail", "payload": '{"n": 2}', "group": "g", "expects_reply": "on", "key": "",
              "queue": "default"}  # fmt: skip
    admin_client.post(url, forged)
    message.refresh_from_db()
    assert (message.kind, message.payload, message.group, message.expects_reply) == (
        "test.echo",
        {"n": 1},
        "",
        False,
    )
    for queue, error in (("x" * 65, "at most 64 characters"), ("no such queue!", "Use 1-64 letters")):
        page = admin_client.post(url, {**forged, "queue": queue})
        assert page.status_code == 200 and error in page.text
    message.refresh_from_db()
    assert message.queue == "default"
    admin_client.post(url, {**forged, "queue": "emails"})
    message.refresh_from_db()
    assert message.queue == "emails"
    assert admin_client.get("/admin/django_dbqueue/message/add/").status_code == 403


# -- 7. bad input in the pause and "my items" forms ------------------------------------------------


def test_the_pause_form_validates_the_queue_name(admin_client: Client) -> None:
    from django_dbqueue.models import QueuePause

    url = reverse("admin:django_dbqueue_message_dbqueue_pause")
    for queue in ("x" * 65, "no such queue!", "emails\n"):
        response = admin_client.post(url, {"operation": "pause", "queue": queue})
        assert response.status_code == 302
        assert any("use 1-64 letters" in text for text in texts(response)), queue
    assert not QueuePause.objects.exists()
    admin_client.post(url, {"operation": "pause", "queue": "emails"})
    assert QueuePause.objects.get().queue == "emails"


def test_my_items_refuses_a_pk_that_is_not_one(admin_client: Client) -> None:
    ticket = Ticket.objects.create(subject="s", customer=1)
    url = reverse("admin:testapp_ticket_dbqueue_mine")
    for pk in ("abc", str(2**70)):
        response = admin_client.post(url, {"pk": pk, "token": "1", "outcome": "done"})
        assert response.status_code == 302
        assert any(text.startswith("Not recorded.") for text in texts(response)), pk
    ticket.refresh_from_db()
    assert ticket.queue_state == QueueState.READY


# -- 4. the permission matrix ------------------------------------------------------------------------

#: What each of the package's admin URLs (by the end of its name) needs, as the model admin's
#: ``has_<name>_permission``. A URL missing here fails the matrix: say what it needs.
URL_PERMISSIONS = {
    "changelist": "view_or_change",
    "history": "view_or_change",
    "change": "view_or_change",  # GET; a POST needs change
    "add": "add",
    "delete": "delete",
    "dbqueue_dashboard": "view_or_change",
    "dbqueue_mine": "dbqueue",
    "dbqueue_take": "dbqueue",
    "dbqueue_pause": "dbqueue",
    "dbqueue_row": "dbqueue",
    "dbqueue_dead_letters": "view_or_change",  # GET; a replay (POST) needs change
}
#: A forged POST to each URL: what would change something if it were let through.
POSTS: dict[str, dict[str, str]] = {
    "change": {},
    "add": {},
    "delete": {"post": "yes"},
    "dbqueue_mine": {"outcome": "release_all"},
    "dbqueue_take": {"n": "3"},
    "dbqueue_pause": {"operation": "pause", "queue": ""},
    "dbqueue_row": {"dbqueue_apply": "1", "delay": "5", "unit": "minutes"},
    "dbqueue_dead_letters": {"group": "", "count": "1"},
}
ROLES = ("anonymous", "staff", "view", "change", "delete", "superuser")


def shipped_admins() -> list[admin.ModelAdmin]:
    """The package's own admins, and a user's admin built on its QueueAdminMixin."""
    return [
        model_admin
        for model_admin in admin.site._registry.values()
        if type(model_admin).__module__.startswith("django_dbqueue.")
        or (isinstance(model_admin, QueueAdminMixin) and model_admin.model is Ticket)
    ]


def role_user(role: str, models: list[type[models.Model]]) -> Any:
    if role == "anonymous":
        return None
    if role == "superuser":
        return User.objects.create_superuser("root", "root@example.com", "pw")
    user = User.objects.create_user(role, is_staff=True)
    verbs = {"staff": (), "view": ("view",), "change": ("view", "change"), "delete": ("view", "delete")}[role]
    codenames = {f"{verb}_{m._meta.model_name}" for m in models for verb in verbs}
    labels = {m._meta.app_label for m in models}
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=labels, codename__in=codenames)
    )
    return User.objects.get(pk=user.pk)  # no permission cache


def allowed(model_admin: admin.ModelAdmin, user: Any, permission: str) -> bool:
    if user is None:
        return False
    request = RequestFactory().get("/")
    request.user = user
    return bool(getattr(model_admin, f"has_{permission}_permission")(request))


def snapshot(tables: list[type[models.Model]]) -> list[Any]:
    return [list(m._base_manager.order_by("pk").values_list()) for m in tables]


@pytest.fixture
def fixture_rows() -> None:
    """One row of each shipped model, each in a state its buttons and actions act on."""
    from django.utils import timezone

    Ticket.objects.create(subject="ready", customer=1)
    job_batch()
    Message.objects.publish("test.echo", {"n": 1}, queue="emails")
    schedule = Schedule.objects.create(name="echo", every=60, target="message:test.echo")
    from django_dbqueue.schedules import fire_now

    fire_now(schedule, fired_by="test")
    if django.VERSION >= (6, 0):
        from tests.testapp import tasks

        tasks.add.enqueue(1, 2)
    now = timezone.now()
    QueueAttempt.objects.create(model="testapp.Ticket", object_id="1", attempt=1, worker_id="w",
                                claimed_at=now, finished_at=now, outcome="succeeded")  # fmt: skip
    from django_dbqueue.models import ArchivedMessage, WorkerProcess

    WorkerProcess.objects.create(worker_id="w", hostname="h", pid=1, queue_models="testapp.Ticket",
                                 started_at=now, last_seen_at=now)  # fmt: skip
    ArchivedMessage.objects.create(original_id=1, queue="default", kind="test.echo", state="succeeded",
                                   attempts=1, enqueued_at=now, finished_at=now)  # fmt: skip


def requests_of(model_admin: admin.ModelAdmin) -> Iterator[tuple[str, str, str, dict[str, Any], str]]:
    """(what, method, url, data, permission) of every URL, row button and action of an admin."""
    opts = model_admin.opts
    prefix = f"{opts.app_label}_{opts.model_name}_"
    row = model_admin.model._base_manager.order_by("pk").first()
    pk = str(row.pk) if row is not None else "0"
    for pattern in model_admin.get_urls():
        if not isinstance(pattern, URLPattern) or not (pattern.name or "").startswith(prefix):
            continue
        suffix = pattern.name[len(prefix) :]
        assert suffix in URL_PERMISSIONS, f"{pattern.name}: a new admin URL; say what permission it needs"
        needs = URL_PERMISSIONS[suffix]
        if suffix == "dbqueue_row":
            for operation in ROW_OPERATIONS:
                url = reverse(f"admin:{pattern.name}", args=[pk, operation])
                yield f"{pattern.name}[{operation}]", "post", url, POSTS[suffix], needs
            continue
        args = [pk] if "object_id" in str(pattern.pattern) else []
        url = reverse(f"admin:{pattern.name}", args=args)
        yield pattern.name, "get", url, {}, needs
        if suffix in POSTS:
            changes = suffix in ("change", "dbqueue_dead_letters")
            yield pattern.name, "post", url, POSTS[suffix], "change" if changes else needs
    superuser = User(is_superuser=True, is_active=True, is_staff=True)
    request = RequestFactory().get("/")
    request.user = superuser
    changelist = reverse(f"admin:{prefix}changelist")
    for name, shipped in model_admin.get_actions(request).items():
        func = getattr(shipped, "func", None) or shipped[0]  # an Action from Django 6.1, else a tuple
        permissions = getattr(func, "allowed_permissions", ())
        assert permissions, f"{opts.label} action {name!r} declares no permissions="
        data = {"action": name, ACTION_CHECKBOX_NAME: [pk], "index": 0, "post": "yes", "dbqueue_apply": "1",
                "priority": "7", "delay": "5", "unit": "minutes", "dbqueue_expected": "1"}  # fmt: skip
        for permission in permissions:
            yield f"{opts.label} action {name}", "post", changelist, data, permission


@override_settings(MESSAGE_STORAGE="django.contrib.messages.storage.cookie.CookieStorage")
def test_the_permission_matrix(fixture_rows: None) -> None:
    admins = shipped_admins()
    if django.VERSION < (6, 0):  # no django.tasks: no task record to open a page of
        admins = [a for a in admins if a.model._meta.model_name != "taskrecord"]
    assert {type(a).__name__ for a in admins} >= {
        "BatchAdmin",
        "ScheduleAdmin",
        "MessageAdmin",
        "TicketAdmin",
    }
    tables = sorted({a.model for a in admins} | {Job}, key=lambda m: m._meta.label)
    # Every role's permissions over every table the admins write (the action of one admin may
    # write another's rows: a batch's members).
    every = [m for m in apps.get_models() if m._meta.app_label in ("django_dbqueue", "testapp")]
    users = {role: role_user(role, every) for role in ROLES}
    clients = {role: Client() for role in ROLES}
    for role, user in users.items():
        if user is not None:
            clients[role].force_login(user)
    # Every request is rolled back after it, so the database before each one is this.
    initial = snapshot(tables)
    checked = 0
    for model_admin in admins:
        for what, method, url, data, permission in requests_of(model_admin):
            for role, user in users.items():
                may = allowed(model_admin, user, permission)
                with transaction.atomic():
                    response = getattr(clients[role], method)(url, data)
                    # An anonymous request is turned away by admin_view before the view runs.
                    after = snapshot(tables) if method == "post" and not may and user is not None else None
                    transaction.set_rollback(True)
                label = f"{role} {method.upper()} {what} ({url})"
                assert response.status_code != 500, label
                if user is None:
                    assert response.status_code == 302 and "/login/" in response["Location"], label
                elif not may:
                    assert response.status_code in (200, 302, 403, 405), label
                    assert after in (None, initial), (
                        f"{label}: changed the database without {permission} permission"
                    )
                elif method == "get" and permission != "dbqueue":
                    assert response.status_code == 200, label
                checked += 1
    assert checked > 300  # the discovery found the admins' URLs, buttons and actions
