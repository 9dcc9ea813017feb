"""Flow control in the claim (issue #22), in-process on the real server: pause/resume,
per-key concurrency and rate limits, their bad input, ``queuectl``, and the plain claim's
statements left as they were. Real worker processes: tests/features/flow/test_flow_processes.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import django
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection, models, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext, isolate_apps

import django_dbqueue
from django_dbqueue.checks import _check_model
from django_dbqueue.flow import limits, pauses
from django_dbqueue.models import Message, QueueKeySlot, QueueMixin, QueuePause
from django_dbqueue.states import QueueState
from tests.conftest import ROOT, skip_on_sqlite
from tests.testapp.models import LimitedJob, Noop, RatedJob

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_pauses():
    pauses.forget()
    yield
    pauses.forget()


def ready(model, **filters) -> list:
    return list(
        model.objects.filter(queue_state=QueueState.READY, **filters).values_list("queue_attempts", flat=True)
    )


# -- pause / resume ----------------------------------------------------------------------------


def test_a_paused_model_is_not_claimed_and_resumes() -> None:
    Noop.objects.bulk_create([Noop() for _ in range(3)])
    assert django_dbqueue.pause("testapp.Noop") is True
    assert django_dbqueue.pause(Noop) is False  # already paused: one row
    assert QueuePause.objects.filter(model="testapp.Noop", queue="").count() == 1
    assert Noop.objects.claim(10) == [] and not Noop.objects.has_ready()
    assert ready(Noop) == [0, 0, 0]  # untouched: no attempt charged
    assert django_dbqueue.is_paused("testapp.Noop")
    assert Noop.objects.resume() is True and Noop.objects.resume() is False
    assert len(Noop.objects.claim(10)) == 3


def test_another_process_sees_a_pause_within_a_poll_interval() -> None:
    from django_dbqueue.conf import settings

    Noop.objects.bulk_create([Noop() for _ in range(2)])
    assert Noop.objects.has_ready()  # this process's snapshot: nothing paused
    # Another host pauses it (a row written without this process's pause(), so its cache
    # is not told): within one poll interval the claim holds back.
    QueuePause.objects.create(model="testapp.Noop")
    time.sleep(settings.POLL_INTERVAL + 0.01)
    assert Noop.objects.claim(5) == []


def test_pausing_one_message_queue_leaves_the_others() -> None:
    Message.objects.publish("flow.kind", {}, queue="emails")
    Message.objects.publish("flow.kind", {}, queue="reports")
    Message.objects.pause("emails")
    claimed = Message.objects.claim(10)
    assert [m.queue for m in claimed] == ["reports"]
    assert Message.objects.filter(queue="emails", queue_state=QueueState.READY, queue_attempts=0).count() == 1
    pauses.resume(Message, "emails")
    assert [m.queue for m in Message.objects.claim(10)] == ["emails"]


def test_bad_pause_targets_are_refused_and_write_nothing() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'shop\.Nope'"):
        pauses.pause("shop.Nope")
    with pytest.raises(ValueError, match="not a concrete QueueMixin model"):
        pauses.pause("auth.User")
    with pytest.raises(ValueError, match="no named queues"):
        pauses.pause(Noop, queue="emails")
    assert not QueuePause.objects.exists()


def test_queuectl_pause_status_resume() -> None:
    call_command("queuectl", "pause", "testapp.Noop")
    call_command("queuectl", "pause", "django_dbqueue.Message", "--queue", "emails")
    from io import StringIO

    out = StringIO()
    call_command("queuectl", "status", stdout=out)
    text = out.getvalue()
    assert "paused testapp.Noop since" in text and "paused django_dbqueue.Message queue 'emails'" in text
    assert "limits testapp.LimitedJob per customer: 2 running" in text
    assert "limits testapp.RatedJob per customer: 5 claims per 1 s" in text
    call_command("queuectl", "resume", "testapp.Noop")
    assert list(QueuePause.objects.values_list("model", "queue")) == [("django_dbqueue.Message", "emails")]
    with pytest.raises(CommandError, match=r"unknown model 'shop\.Nope'"):
        call_command("queuectl", "pause", "testapp.Noop", "shop.Nope")
    assert not QueuePause.objects.filter(model="testapp.Noop").exists()  # nothing half-done


def test_queuectl_unknown_model_exits_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "django", "queuectl", "pause", "shop.Nope", "--settings", "tests.settings"],
        cwd=ROOT,
        env={**os.environ, "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "unknown model 'shop.Nope'" in done.stderr


# -- the plain claim is unchanged --------------------------------------------------------------


# The pause snapshot read by has_ready() is kept for one poll interval (45 ms by default): on
# a loaded machine the claim came after it had expired and read the table again (a fourth
# statement). A long interval keeps the snapshot for the whole test.
@override_settings(DBQUEUE_POLL_INTERVAL=60)
def test_plain_claim_sends_the_same_statements() -> None:
    """No limit declared and nothing paused: the claim is the SELECT … FOR UPDATE SKIP
    LOCKED of claim_candidates(), the UPDATE by primary key, and the load: nothing else."""
    Noop.objects.bulk_create([Noop() for _ in range(3)])
    Noop.objects.has_ready()  # the pause snapshot of this poll interval is read here
    with CaptureQueriesContext(connection) as protocol, transaction.atomic():
        list(Noop.objects.all().claim_candidates(2))  # the protocol's locking SELECT, as sent
    expected_select = next(
        q["sql"] for q in protocol.captured_queries if q["sql"].upper().startswith("SELECT")
    )
    with CaptureQueriesContext(connection) as captured:
        claimed = Noop.objects.claim(2)
    assert len(claimed) == 2
    sql = [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE"))
    ]
    statements = [s for s in sql if not s.upper().startswith(("BEGIN", "COMMIT"))]
    assert len(statements) == 3, sql
    assert statements[0] == expected_select
    assert statements[1].upper().startswith("UPDATE") and statements[2].upper().startswith("SELECT")
    assert not any(name in s for s in sql for name in ("queuepause", "queuekeyslot"))


# -- concurrency limits --------------------------------------------------------------------------


def test_concurrency_limit_per_key_in_one_claim() -> None:
    LimitedJob.objects.bulk_create(
        [LimitedJob(customer=c) for c in "aaaaabbbbb"] + [LimitedJob(customer=None) for _ in range(3)]
    )
    claimed = LimitedJob.objects.claim(100)
    keys = sorted(str(j.customer) for j in claimed)
    assert keys == ["None", "None", "None", "a", "a", "b", "b"]
    assert ready(LimitedJob) == [0] * 6  # held back: READY, no attempt charged
    assert LimitedJob.objects.claim(100) == []  # both keys full
    next(j for j in claimed if j.customer == "a").mark_succeeded()
    again = LimitedJob.objects.claim(100)
    assert [j.customer for j in again] == ["a"]


@pytest.mark.parametrize(("model", "first"), [(LimitedJob, 2), (RatedJob, 5)])
def test_a_full_key_does_not_fill_a_batch(model, first) -> None:
    """The locking SELECT leaves out the rows of keys at their limit (and only those: not the
    rows without a key). Were they locked first, ``claim(2)`` would lock two rows of the full
    key, put both back and return nothing."""
    full = [model(customer="a", queue_priority=5) for _ in range(first + 2)]
    model.objects.bulk_create([*full, model(customer=None), model(customer="b")])
    assert [j.customer for j in model.objects.claim(first)] == ["a"] * first
    assert sorted(str(j.customer) for j in model.objects.claim(2)) == ["None", "b"]


@pytest.mark.databases("postgresql", reason="PostgreSQL's backend sets how RUNNING rows are counted")
def test_a_workers_limited_claim_counts_running_rows_by_index_scan_on_postgresql() -> None:
    """A bitmap scan of the RUNNING rows reads every row that was RUNNING since the last
    vacuum on every claim; an index scan marks those entries dead once. The worker's claim
    (its own transaction) sets that for itself; a claim inside a caller's transaction sets
    nothing, and nothing outlives the claim's transaction."""
    LimitedJob.objects.bulk_create([LimitedJob(customer=f"k{i % 7}") for i in range(40)])
    with CaptureQueriesContext(connection) as captured:
        assert LimitedJob.objects.claim(5)
    sql = [q["sql"] for q in captured.captured_queries]
    setting = sql.index("SET LOCAL enable_bitmapscan = off")
    count = next(i for i, s in enumerate(sql) if "COUNT(" in s.upper())
    assert setting < count, sql
    with connection.cursor() as cursor:
        cursor.execute("SHOW enable_bitmapscan")
        assert cursor.fetchone()[0] == "on"  # ended with the claim's transaction
        with transaction.atomic():
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute("EXPLAIN " + captured.captured_queries[count]["sql"])
            plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap" not in plan and "Index" in plan, plan
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        assert LimitedJob.objects.claim(5)
    assert not any("enable_bitmapscan" in q["sql"] for q in inside.captured_queries)


@skip_on_sqlite
def test_a_key_whose_slot_another_claim_holds_is_skipped_not_waited_for(second_connection) -> None:
    LimitedJob.objects.bulk_create([LimitedJob(customer=c) for c in "aabb"])
    assert len(LimitedJob.objects.claim(1)) == 1  # creates the key's slot ("a" comes first)
    LimitedJob.objects.filter(queue_state=QueueState.RUNNING).update(queue_state=QueueState.READY)
    slot = QueueKeySlot.objects.get(model="testapp.LimitedJob", value="a")
    table = connection.ops.quote_name(QueueKeySlot._meta.db_table)
    second_connection.set_autocommit(False)
    try:
        with second_connection.cursor() as cursor:  # another claimer deciding on key "a"
            cursor.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [slot.pk])
        started = time.monotonic()
        claimed = LimitedJob.objects.claim(10)
        assert time.monotonic() - started < 2  # not blocked
        assert sorted(j.customer for j in claimed) == ["b", "b"]
    finally:
        second_connection.rollback()
        second_connection.set_autocommit(True)
    assert sorted(j.customer for j in LimitedJob.objects.claim(10)) == ["a", "a"]


# -- rate limits ---------------------------------------------------------------------------------


def test_rate_limit_per_key_charges_no_attempts() -> None:
    RatedJob.objects.bulk_create([RatedJob(customer="r") for _ in range(12)] + [RatedJob(customer="s")])
    first = RatedJob.objects.claim(100)
    assert sorted(j.customer for j in first) == ["r"] * 5 + ["s"]
    assert RatedJob.objects.claim(100) == []
    assert ready(RatedJob) == [0] * 7
    slot = QueueKeySlot.objects.get(model="testapp.RatedJob", value="r")
    assert slot.window_count == 5
    time.sleep(1.05)  # the window (1 s, database clock) ends
    assert len(RatedJob.objects.claim(100)) == 5
    assert len(RatedJob.objects.claim(100)) == 0


# -- bad declarations ----------------------------------------------------------------------------


@isolate_apps("tests.testapp")
@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"queue_limit_key": "customer", "queue_concurrency_limit": 0}, "queue_concurrency_limit must be"),
        ({"queue_limit_key": "customer", "queue_concurrency_limit": True}, "queue_concurrency_limit must be"),
        ({"queue_limit_key": "customer", "queue_rate_limit": (10, -1.0)}, "queue_rate_limit must be"),
        ({"queue_limit_key": "customer", "queue_rate_limit": (0, 1.0)}, "queue_rate_limit must be"),
        ({"queue_limit_key": "account", "queue_concurrency_limit": 2}, "names 'account', which is not"),
        ({"queue_concurrency_limit": 2}, "no queue_limit_key"),
        ({"queue_limit_key": "customer"}, "without a limit"),
    ],
)
def test_bad_limits_are_system_check_errors(attrs, message) -> None:
    body = {"__module__": "tests.testapp.models", "customer": models.CharField(max_length=10), **attrs}
    model = type(
        "BadLimits",
        (QueueMixin,),
        {**body, "Meta": type("Meta", (QueueMixin.Meta,), {"app_label": "testapp"})},
    )
    errors = [e for e in _check_model(model) if e.id == "django_dbqueue.E030"]
    assert len(errors) == 1 and message in errors[0].msg
    with pytest.raises(ImproperlyConfigured, match=message.split("'")[0]):
        limits.limits_of(model)


def test_key_by_foreign_key_attname_is_accepted() -> None:
    assert limits.problems(LimitedJob) == []
    assert limits.limits_of(LimitedJob) == limits.Limits(
        key="customer", concurrency=2, rate=None, period=None
    )
    assert limits.limits_of(Noop) is None


def test_claim_in_a_transaction_sees_a_pause_made_in_it() -> None:
    Noop.objects.bulk_create([Noop()])
    with transaction.atomic():
        pauses.pause(Noop)
        assert Noop.objects.claim(1) == []
        transaction.set_rollback(True)
    pauses.forget()
    assert len(Noop.objects.claim(1)) == 1


# -- the admin -----------------------------------------------------------------------------------


def test_admin_pauses_and_resumes_from_the_changelist_and_shows_it(admin_client) -> None:
    from django.contrib.auth.models import User
    from django.urls import reverse

    from tests.testapp.models import Job

    changelist = reverse("admin:testapp_job_changelist")
    page = admin_client.get(changelist).content.decode()
    assert 'data-paused="false"' in page and "Pause claims" in page
    url = reverse("admin:testapp_job_dbqueue_pause")
    assert admin_client.get(url).status_code == 405  # a change: POST only
    response = admin_client.post(url, {"operation": "pause"})
    assert response.status_code == 302
    assert QueuePause.objects.filter(model="testapp.Job", queue="", paused_by="user:admin").exists()
    page = admin_client.get(changelist).content.decode()
    assert 'data-paused="true"' in page and "Resume claims" in page
    dashboard = admin_client.get(reverse("admin:testapp_job_dbqueue_dashboard")).content.decode()
    assert 'data-paused="true"' in dashboard
    assert Job.objects.claim(1) == []
    admin_client.post(url, {"operation": "resume"})
    assert not QueuePause.objects.exists()
    # Someone who may only view the queue sees the state, no button, and cannot post.
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    admin_client.force_login(viewer)
    page = admin_client.get(changelist).content.decode()
    assert 'id="dbqueue-pause"' in page and "Pause claims" not in page
    assert admin_client.post(url, {"operation": "pause"}).status_code == 403
    assert not QueuePause.objects.exists()


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0")
def test_a_paused_task_queue_is_left_by_the_worker() -> None:
    from django.tasks import TaskResultStatus

    from django_dbqueue.models import TaskRecord
    from django_dbqueue.worker import Worker
    from tests.testapp import tasks

    other = tasks.shout.enqueue("hi")
    default = tasks.add.enqueue(1, 2)
    django_dbqueue.pause("django_dbqueue.TaskRecord", queue="default")
    Worker(models=[TaskRecord], burst=True, handle_signals=False).run()
    assert tasks.shout.get_result(other.id).return_value == "HI"
    assert tasks.add.get_result(default.id).status == TaskResultStatus.READY
    call_command("queuectl", "resume", "django_dbqueue.TaskRecord", "--queue", "default")
    Worker(models=[TaskRecord], burst=True, handle_signals=False).run()
    assert tasks.add.get_result(default.id).return_value == 3
