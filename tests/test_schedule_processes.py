"""Schedules fired by real ``runqueue`` processes: exactly once per slot across hosts, and
catch-up after an outage of every worker, by policy."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from django_dbqueue.models import Message, Schedule, ScheduleFiring
from django_dbqueue.states import QueueState
from tests.conftest import wait_until
from tests.testapp.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]
FAST = {"DBQUEUE_TEST_SCHEDULE_INTERVAL": "0.1"}


def test_three_hosts_fire_each_of_ten_minutes_of_slots_exactly_once(start_worker) -> None:
    # Ten minutes of 1-second slots are due when the hosts start (fast-forwarded: all fire
    # at once, so the three race for every slot), then ~20 s more come due while they run.
    started = timezone.now().replace(microsecond=0)
    Schedule.objects.create(
        name="every-second",
        cron="* * * * * *",
        timezone="Europe/Berlin",
        target="message:test.echo",
        catch_up="all",
        catch_up_limit=10_000,
        next_due=started - timedelta(minutes=10),
    )
    hosts = [start_worker("django_dbqueue.Message", "--concurrency", "2", extra_env=FAST) for _ in range(3)]
    assert wait_until(lambda: ScheduleFiring.objects.count() >= 600, timeout=60)
    time.sleep(20)
    for host in hosts:
        host.signal(signal.SIGTERM)
    for host in hosts:
        assert host.wait(timeout=60) == 0, host.output
    slots = list(ScheduleFiring.objects.order_by("slot").values_list("slot", flat=True))
    # Every second from the first missed slot to the last fired one, none twice, none missing.
    first = started - timedelta(minutes=10)
    assert slots[0] == first and len(slots) >= 600 + 15
    assert slots == [first + timedelta(seconds=n) for n in range(len(slots))]
    # The job exists iff its firing row does: one Message per firing, each named by its firing.
    jobs = set(ScheduleFiring.objects.values_list("job", flat=True))
    assert len(jobs) == len(slots) == Message.objects.filter(kind="test.echo").count()
    assert jobs == {f"django_dbqueue.Message:{pk}" for pk in Message.objects.values_list("pk", flat=True)}
    # Firing was shared: more than one host (process) won slots.
    by_host = dict(ScheduleFiring.objects.values_list("fired_by").annotate(n=Count("id")))
    print(f"{len(slots)} slots, one firing each, by host: {sorted(by_host.values())}")
    assert len(by_host) >= 2, by_host


def test_missed_slots_catch_up_by_policy_when_a_worker_comes_back(start_worker) -> None:
    # No worker ran for four days: a daily slot 5 hours ago and three before it were missed.
    newest = (timezone.now() - timedelta(hours=5)).replace(second=0, microsecond=0)
    cron = f"{newest.minute} {newest.hour} * * *"
    for policy, limit in (("skip", 10), ("latest", 10), ("all", 2), ("all", 10)):
        Schedule.objects.create(
            name=f"{policy}-{limit}",
            cron=cron,
            timezone="UTC",
            target="message:test.echo",
            catch_up=policy,
            catch_up_limit=limit,
            next_due=newest - timedelta(days=3),
        )
    worker = start_worker("django_dbqueue.Message", "--burst")  # one tick, then drain
    assert worker.wait(timeout=60) == 0, worker.output
    fired = dict(ScheduleFiring.objects.values_list("schedule__name").annotate(n=Count("id")))
    assert fired == {"latest-10": 1, "all-2": 2, "all-10": 4}
    assert Message.objects.count() == 7
    assert set(ScheduleFiring.objects.filter(schedule__name="latest-10").values_list("slot", flat=True)) == {
        newest.astimezone(UTC)
    }
    # Every schedule moved on to tomorrow's slot, the skipped one too.
    assert set(Schedule.objects.values_list("next_due", flat=True)) == {newest + timedelta(days=1)}


def test_no_schedules_fires_nothing(start_worker) -> None:
    Schedule.objects.create(
        name="off", every=1, target="message:test.echo", next_due=datetime(2026, 1, 1, tzinfo=UTC)
    )
    worker = start_worker("django_dbqueue.Message", "--burst", "--no-schedules")
    assert worker.wait(timeout=60) == 0, worker.output
    assert not ScheduleFiring.objects.exists()


def test_slots_fire_on_time_while_the_only_worker_runs_a_long_job(start_worker) -> None:
    Job.objects.create(name="long", sleep=6)
    Schedule.objects.create(name="tick", every=1, target="message:test.echo", next_due=timezone.now())
    worker = start_worker("testapp.Job", "--concurrency", "1")
    assert wait_until(lambda: Job.objects.filter(queue_state=QueueState.RUNNING).exists(), timeout=30)
    before = ScheduleFiring.objects.count()
    time.sleep(4)
    # The job still runs, and the ticker thread kept firing once a second beside it.
    assert Job.objects.filter(queue_state=QueueState.RUNNING).exists()
    assert ScheduleFiring.objects.count() - before >= 3
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output
