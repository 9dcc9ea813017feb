"""Schedules on the real database: slots, the ledger, catch-up, DST, sync, bad input, admin.

The worker's tick is ``fire_due()``; here ``fire_schedule()`` is called with the clock a test
chooses (an injected "now"), so days of slots pass in a moment. Real processes racing for the
same slots are in test_schedule_processes.py.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import django
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_dbqueue.checks import check_schedules
from django_dbqueue.compat import UTC
from django_dbqueue.models import Message, Schedule, ScheduleFiring
from django_dbqueue.schedules import InvalidSchedule, declare, fire_due, fire_now, schedule, sync
from django_dbqueue.schedules.firing import fire_schedule, fire_slot
from django_dbqueue.schedules.targets import resolve
from django_dbqueue.worker.ticker import Ticker
from tests.conftest import every_database, wait_until
from tests.testapp.models import Job

pytestmark = pytest.mark.django_db(transaction=True)
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture(autouse=True)
def no_decorated_schedules():
    before = dict(declare._decorated)
    yield
    declare._decorated.clear()
    declare._decorated.update(before)


def make(name="s", **fields) -> Schedule:
    fields.setdefault("target", "message:test.echo")
    return Schedule.objects.create(name=name, **fields)


def tick_through(row: Schedule, start: datetime, end: datetime, step: timedelta) -> None:
    """Fire ``row`` at every ``step`` of an injected clock, as a worker's ticks would."""
    now = start
    while now <= end:
        row.refresh_from_db()
        if row.next_due <= now:
            fire_schedule(row, now, "default", "test")
        now += step


def test_a_due_slot_fires_once_and_its_job_commits_with_it() -> None:
    row = make(every=1, catch_up="all", catch_up_limit=5, next_due=timezone.now() - timedelta(minutes=5))
    assert fire_due(fired_by="t") == 5  # the newest 5 of ~300 missed slots
    firings = list(ScheduleFiring.objects.order_by("slot"))
    assert len(firings) == 5 == Message.objects.filter(kind="test.echo").count()
    assert {f.job for f in firings} == {f"django_dbqueue.Message:{m.pk}" for m in Message.objects.all()}
    row.refresh_from_db()
    assert row.last_slot == firings[-1].slot and row.next_due > firings[-1].slot and row.last_error == ""


def test_a_slot_fired_already_rolls_back_the_second_job() -> None:
    row = make(every=60, next_due=timezone.now())
    enqueue = resolve(row.target, row.arguments, "default")
    slot, now = datetime(2026, 1, 1, tzinfo=UTC), timezone.now()
    assert fire_slot(row, slot, enqueue, using="default", now=now, fired_by="a") is not None
    # The loser's INSERT hits the unique key: its Message is rolled back with it.
    assert fire_slot(row, slot, enqueue, using="default", now=now, fired_by="b") is None
    assert ScheduleFiring.objects.count() == 1 == Message.objects.count()


def test_ticks_drifting_against_one_second_slots_fire_every_slot_under_the_default_policy() -> None:
    # A worker's ticker ticks about once a second plus the time a tick takes: against a
    # one-second schedule its ticks drift, and every few ticks one finds two due slots. Both
    # are on time (a worker was ticking all along), so both fire under the default policy;
    # before, "latest" dropped the older one of each pair (7 of the 34 slots below).
    start = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
    row = make(every=1, next_due=start)
    assert row.catch_up == "latest"
    tick_through(row, start, start + timedelta(seconds=33.8), timedelta(milliseconds=1300))
    slots = list(ScheduleFiring.objects.order_by("slot").values_list("slot", flat=True))
    assert slots == [start + timedelta(seconds=n) for n in range(34)]
    assert Message.objects.filter(kind="test.echo").count() == 34


@pytest.mark.parametrize("policy", ["skip", "latest", "all"])
def test_slots_at_most_the_grace_late_fire_whatever_the_policy(policy) -> None:
    # 45 s without a tick (a slow restart) is within DBQUEUE_SCHEDULE_GRACE (60 s): the slots
    # are late but on time, and every one of them fires, catch_up_limit or not.
    now = datetime(2026, 6, 10, 12, 0, 0, 500_000, tzinfo=UTC)
    row = make(every=1, catch_up=policy, catch_up_limit=2, next_due=now - timedelta(seconds=45.5))
    fire_schedule(row, now, "default", "test")
    assert ScheduleFiring.objects.count() == 46 == Message.objects.count()
    row.refresh_from_db()
    assert row.next_due == now.replace(microsecond=0) + timedelta(seconds=1)


@pytest.mark.parametrize(("policy", "expected"), [("skip", 1), ("latest", 1), ("all", 2)])
def test_slots_later_than_the_grace_were_missed_and_the_policy_decides(policy, expected) -> None:
    # 61 s without a tick: no worker ticked for longer than the grace, so the policy applies.
    now = datetime(2026, 6, 10, 12, 0, 0, 500_000, tzinfo=UTC)
    row = make(every=1, catch_up=policy, catch_up_limit=2, next_due=now - timedelta(seconds=61.5))
    fire_schedule(row, now, "default", "test")
    slots = list(ScheduleFiring.objects.order_by("slot").values_list("slot", flat=True))
    newest = now.replace(microsecond=0)
    assert slots == [newest - timedelta(seconds=n) for n in reversed(range(expected))]


@pytest.mark.parametrize(
    ("policy", "limit", "expected"), [("skip", 10, 0), ("latest", 10, 1), ("all", 3, 3), ("all", 10, 4)]
)
def test_missed_slots_catch_up_by_policy(policy, limit, expected) -> None:
    now = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
    # Daily at 07:00 UTC, last fired four days ago: 4 missed slots, the newest 5 hours old.
    row = make(cron="0 7 * * *", timezone="UTC", catch_up=policy, catch_up_limit=limit)
    row.next_due = datetime(2026, 6, 7, 7, 0, tzinfo=UTC)
    row.save()
    fire_schedule(row, now, "default", "test")
    slots = list(ScheduleFiring.objects.order_by("slot").values_list("slot", flat=True))
    assert len(slots) == expected == Message.objects.count()
    if slots:  # the newest ones
        assert slots[-1] == datetime(2026, 6, 10, 7, 0, tzinfo=UTC)
    row.refresh_from_db()
    assert row.next_due == datetime(2026, 6, 11, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "day",
    [datetime(2026, 3, 29, tzinfo=BERLIN), datetime(2026, 10, 25, tzinfo=BERLIN)],
    ids=["spring", "fall"],
)
def test_daily_0230_in_berlin_fires_once_on_a_dst_day(day) -> None:
    row = make(cron="30 2 * * *", timezone="Europe/Berlin", catch_up="all", catch_up_limit=5)
    start = (day - timedelta(days=1)).astimezone(UTC)
    row.next_due = start
    row.save()
    tick_through(row, start, start + timedelta(days=3), timedelta(minutes=7))
    local_days = [
        slot.astimezone(BERLIN).date() for slot in ScheduleFiring.objects.values_list("slot", flat=True)
    ]
    assert sorted(local_days) == [(day + timedelta(days=n)).date() for n in (-1, 0, 1, 2)][: len(local_days)]
    assert local_days.count(day.date()) == 1
    assert len(local_days) == len(set(local_days)) == Message.objects.count() >= 3


def test_run_now_is_a_manual_firing_and_leaves_the_slots_alone() -> None:
    row = make(every=3600, next_due=timezone.now() + timedelta(hours=1))
    before = row.next_due
    firing = fire_now(row, fired_by="admin:ann")
    assert firing.manual and firing.fired_by == "admin:ann" and Message.objects.count() == 1
    row.refresh_from_db()
    assert row.next_due == before


@override_settings(DBQUEUE_SCHEDULE_TARGETS=["message:test.echo", "message:no.such.kind"])
def test_a_broken_target_is_logged_kept_on_the_row_and_skipped(caplog) -> None:
    broken = make(
        "broken", every=1, target="message:no.such.kind", next_due=timezone.now() - timedelta(seconds=2)
    )
    fine = make("fine", every=1, next_due=timezone.now() - timedelta(seconds=2))
    assert fire_due(fired_by="t") == ScheduleFiring.objects.count() >= 2  # its 2 or 3 due slots
    broken.refresh_from_db()
    fine.refresh_from_db()
    assert "no handler is registered" in broken.last_error and broken.next_due > timezone.now() - timedelta(
        seconds=1
    )
    assert fine.last_slot is not None and {f.schedule for f in ScheduleFiring.objects.all()} == {fine}
    assert "no handler is registered" in caplog.text


def test_a_model_row_and_a_task_are_targets_too() -> None:
    row = make("job", every=60, target="model:testapp.Job", arguments={"fields": {"name": "from-schedule"}})
    fire_now(row, "t")
    assert Job.objects.get().name == "from-schedule"
    django_tasks = pytest.importorskip("django.tasks")  # noqa: F841 - Django >= 6.0
    task = make("task", every=60, target="task:tests.testapp.tasks.add", arguments={"args": [2, 3]})
    job = fire_now(task, "t").job
    assert job.startswith("django_dbqueue.TaskRecord:")


# -- declarations: the decorator, the setting, sync ---------------------------------------------


def test_sync_creates_follows_code_keeps_admin_overrides_and_disables_what_code_dropped() -> None:
    declared = {"digest": {"message": "test.echo", "every": 60, "payload": {"n": 1}}}
    with override_settings(DBQUEUE_SCHEDULES=declared):
        assert sync().created == ["digest"]
        row = Schedule.objects.get(name="digest")
        assert row.in_code and row.enabled and row.next_due > timezone.now() - timedelta(seconds=61)
        # An admin edit of the timing is an override: the next sync keeps it.
        row.every = 120
        row.save()
        from django_dbqueue.schedules.syncing import edited

        edited(row, ["every"], "default")
    declared["digest"] = {"message": "test.echo", "every": 30, "payload": {"n": 2}}
    with override_settings(DBQUEUE_SCHEDULES=declared):
        assert sync().updated == ["digest"]
    row.refresh_from_db()
    assert row.every == 120 and row.arguments == {"payload": {"n": 2}}
    assert row.overrides == ["every"]
    with override_settings(DBQUEUE_SCHEDULES={}):
        assert sync().disabled == ["digest"]
    row.refresh_from_db()
    assert not row.enabled and not row.in_code


def test_the_decorator_declares_a_handler_schedule() -> None:
    @schedule(every=timedelta(minutes=5), name="cleanup", catch_up="skip")
    def cleanup(message) -> None:
        pass

    result = sync()
    assert "cleanup" in result.created
    row = Schedule.objects.get(name="cleanup")
    assert row.target == "message:schedule.cleanup" and row.every == 300 and row.catch_up == "skip"
    fire_now(row, "t")
    assert Message.objects.get().kind == "schedule.cleanup"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"message": "test.echo", "cron": "61 * * * *"}, "Bad minute"),
        ({"message": "test.echo", "cron": "* * *"}, "use 5 fields"),
        ({"message": "test.echo", "cron": "0 0 30 2 *"}, "day-of-month"),
        ({"message": "test.echo", "every": 0}, "whole number of seconds"),
        ({"message": "test.echo", "every": -5}, "whole number of seconds"),
        ({"message": "test.echo", "every": 60, "cron": "* * * * *"}, "exactly one of cron"),
        ({"message": "test.echo", "cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"message": "no.such.kind", "every": 60}, "no handler is registered"),
        # Django 5.2 has no django.tasks: every task target is refused for that first.
        (
            {"task": "tests.testapp.tasks.nope", "every": 60},
            "cannot be imported" if django.VERSION >= (6, 0) else "needs Django 6.0",
        ),
        ({"model": "testapp.Nope", "every": 60}, "unknown model"),
        ({"model": "testapp.Ledger", "every": 60}, "not a concrete QueueMixin model"),
        ({"message": "test.echo", "every": 60, "catch_up": "sometimes"}, "catch_up must be one of"),
        ({"message": "test.echo", "every": 60, "catch_up": "all", "catch_up_limit": 0}, "catch_up_limit"),
        ({"every": 60}, "exactly one target"),
        ({"message": "test.echo", "every": 60, "colour": "red"}, "unknown keys"),
    ],
)
def test_bad_declarations_get_a_check_error_and_write_nothing(spec, problem) -> None:
    with override_settings(DBQUEUE_SCHEDULES={"bad": spec}):
        messages = check_schedules()
        assert [m.id for m in messages] == ["django_dbqueue.E050"] and problem in messages[0].msg
        sync()
    assert not Schedule.objects.exists() and not ScheduleFiring.objects.exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": "nonsense"},
        {"every": 0},
        {"every": timedelta(seconds=-1)},
        {"cron": "* * * * *", "timezone": "X/Y"},
    ],
)
def test_the_decorator_refuses_bad_timing_at_import_time(kwargs) -> None:
    with pytest.raises(InvalidSchedule):
        schedule(**kwargs)(lambda message: None)
    assert not declare._decorated


def test_a_setting_that_is_not_a_dict_fails_its_check() -> None:
    with override_settings(DBQUEUE_SCHEDULES=["nightly"]):
        from django_dbqueue.settings_checks import check_settings

        assert "django_dbqueue.E051" in [m.id for m in check_settings()]


def test_runqueue_no_schedules_is_an_option() -> None:
    call_command("runqueue", "testapp.Job", "--burst", "--no-schedules", "--no-progress", verbosity=0)


def test_purgequeue_deletes_old_firings_only() -> None:
    row = make(every=60, next_due=timezone.now())
    old = ScheduleFiring.objects.create(
        schedule=row, slot=datetime(2026, 1, 1, tzinfo=UTC), fired_at=timezone.now() - timedelta(days=40)
    )
    new = ScheduleFiring.objects.create(
        schedule=row, slot=datetime(2026, 1, 2, tzinfo=UTC), fired_at=timezone.now()
    )
    call_command("purgequeue", "--firings-older-than", "30d", "--pause", "0", verbosity=0)
    assert list(ScheduleFiring.objects.values_list("pk", flat=True)) == [new.pk] != [old.pk]


def test_syncschedules_writes_the_declarations_and_fails_on_a_bad_one(capsys) -> None:
    with override_settings(DBQUEUE_SCHEDULES={"digest": {"message": "test.echo", "every": 60}}):
        call_command("syncschedules")
    assert "created: digest" in capsys.readouterr().out and Schedule.objects.get().name == "digest"
    with (
        override_settings(DBQUEUE_SCHEDULES={"bad": {"message": "test.echo", "every": -1}}),
        pytest.raises(CommandError, match="whole number of seconds"),
    ):
        call_command("syncschedules")
    assert Schedule.objects.get().name == "digest"  # disabled (no longer declared), not deleted


def _kill_other_sessions() -> int:
    """End every other session of the test database from this one, as a server restart or an
    operator's KILL does to the ticker's connection; return how many were ended."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
            )
            ids = [row[0] for row in cursor.fetchall()]
            for session in ids:
                cursor.execute("KILL CONNECTION %s", [session])
            return len(ids)
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return len(cursor.fetchall())


@pytest.mark.skipif(
    "os.environ.get('DATABASE_URL', 'sqlite').startswith('sqlite')",
    reason="SQLite has no server session to kill",
)
@every_database("a lost session raises each driver's own error, which the ticker must recognise")
@pytest.mark.parametrize("scheduled", [True, False], ids=["a-schedule", "no-schedule"])
@override_settings(DBQUEUE_SCHEDULE_INTERVAL=0.1)
def test_a_database_outage_is_one_line_from_the_ticker_not_a_traceback(caplog, scheduled) -> None:
    if scheduled:
        make(every=3600, next_due=timezone.now() + timedelta(hours=1))
    ticker = Ticker("outage-test", "default")
    caplog.set_level(logging.DEBUG, logger="django_dbqueue.schedules")
    ticker.start()
    try:
        assert wait_until(lambda: ticker.synced and ticker.next_look > 0, timeout=30)
        assert ticker.scheduled is scheduled
        assert _kill_other_sessions() >= 1
        assert wait_until(lambda: ticker.failures >= 1, timeout=30)
        assert wait_until(lambda: ticker.failures == 0, timeout=30)  # and it ticks again
    finally:
        ticker.stop()
    # One line at WARNING while a schedule is enabled, like the worker's own line; none when
    # nothing is scheduled (the worker's line says it); never a traceback.
    warned = [
        r for r in caplog.records if r.name == "django_dbqueue.schedules" and r.levelno >= logging.WARNING
    ]
    assert len(warned) == (1 if scheduled else 0), [r.getMessage() for r in warned]
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in warned)
    assert "Traceback" not in caplog.text
