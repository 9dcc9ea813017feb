"""Schedules fired by real ``runqueue`` processes: exactly once per slot across hosts, and
catch-up after an outage of every worker, by policy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from django_dbqueue.compat import UTC
from django_dbqueue.models import Message, Schedule, ScheduleFiring
from django_dbqueue.states import QueueState
from tests.conftest import wait_until
from tests.testapp.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]
FAST = {"DBQUEUE_TEST_SCHEDULE_INTERVAL": "0.1"}


def test_three_hosts_fire_every_slot_exactly_once_under_the_default_policy(start_worker) -> None:
    # A one-second schedule with the default catch-up policy ("latest"): 30 s of slots are due
    # when the hosts start (late, but within DBQUEUE_SCHEDULE_GRACE: on time, so the three
    # race for every one of them), then ~20 s more come due while they run, with ticks that
    # drift against the slots. Every slot must fire, once. A second schedule has ten minutes
    # of missed slots that catch_up="all" fires, all at once: the race at scale.
    started = timezone.now().replace(microsecond=0)
    live = Schedule.objects.create(
        name="every-second",
        cron="* * * * * *",
        timezone="Europe/Berlin",
        target="message:test.echo",
        next_due=started - timedelta(seconds=30),
    )
    assert live.catch_up == "latest"
    Schedule.objects.create(
        name="ten-minutes-missed",
        every=1,
        target="message:test.echo",
        catch_up="all",
        catch_up_limit=10_000,
        next_due=started - timedelta(minutes=10),
    )
    hosts = [start_worker("django_dbqueue.Message", "--concurrency", "2", extra_env=FAST) for _ in range(3)]
    assert wait_until(lambda: ScheduleFiring.objects.filter(schedule=live).count() >= 30, timeout=60)
    # Then the slots that come due while the hosts run: at least 15 more of each schedule (and a
    # few to spare), about 20 s, the ticks drifting against the slots all the while; and until
    # a second host has won a slot (on a loaded machine the others may start seconds late).
    missed = Schedule.objects.get(name="ten-minutes-missed")
    assert wait_until(
        lambda: (
            ScheduleFiring.objects.filter(schedule=live).count() >= 30 + 18
            and ScheduleFiring.objects.filter(schedule=missed).count() >= 600 + 18
            and ScheduleFiring.objects.values("fired_by").distinct().count() >= 2
        ),
        timeout=90,
        interval=0.5,
    )
    for host in hosts:
        host.signal(signal.SIGTERM)
    for host in hosts:
        assert host.wait(timeout=60) == 0, host.output
    # Every second from the first due slot to the last fired one, none twice, none missing.
    for schedule, first, at_least in ((live, started - timedelta(seconds=30), 30 + 15),
                                      (Schedule.objects.get(name="ten-minutes-missed"),
                                       started - timedelta(minutes=10), 600 + 15)):  # fmt: skip
        slots = list(schedule.firings.order_by("slot").values_list("slot", flat=True))
        span = int((slots[-1] - first).total_seconds()) + 1 if slots else 0
        missing = sorted({first + timedelta(seconds=n) for n in range(span)} - set(slots))
        print(f"{schedule.name}: {len(slots)} slots fired, {len(missing)} missing: {missing[:5]}")
        assert slots[0] == first and len(slots) >= at_least
        assert slots == [first + timedelta(seconds=n) for n in range(len(slots))]
    # The job exists iff its firing row does: one Message per firing, each named by its firing.
    jobs = set(ScheduleFiring.objects.values_list("job", flat=True))
    assert len(jobs) == ScheduleFiring.objects.count() == Message.objects.filter(kind="test.echo").count()
    assert jobs == {f"django_dbqueue.Message:{pk}" for pk in Message.objects.values_list("pk", flat=True)}
    # Firing was shared: more than one host (process) won slots.
    by_host = dict(ScheduleFiring.objects.values_list("fired_by").annotate(n=Count("id")))
    print(f"by host: {sorted(by_host.values())}")
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
    # The ticker thread keeps firing once a second beside the 6-second job...
    assert wait_until(lambda: ScheduleFiring.objects.count() - before >= 3, timeout=5)
    # ... which still runs.
    assert Job.objects.filter(queue_state=QueueState.RUNNING).exists()
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def libfaketime_runs_python() -> bool:
    """Whether libfaketime (Debian's faketime package) can run this interpreter with a shifted
    wall clock: 0.9.10 hangs Python's time.sleep() (which waits on CLOCK_MONOTONIC with an
    absolute deadline) unless the monotonic clock is left alone, and then fails it with EINVAL."""
    if not os.path.exists(LIBFAKETIME):
        return False
    probe = "import time, threading; time.sleep(0.01); threading.Event().wait(0.01)"
    env = {**os.environ, "LD_PRELOAD": LIBFAKETIME, "FAKETIME": "+1h", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", probe], env=env, timeout=10, capture_output=True)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def skewed(offset: str) -> dict[str, str]:
    """The environment of a runqueue process whose host clock is ``offset`` off: libfaketime
    when it can run Python here, else the same shift made in Python before Django starts
    (time.time and django.utils.timezone.now, which the models' defaults and the package read;
    tests/chaos/skew.py)."""
    if libfaketime_runs_python():
        env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    else:
        env = {"DBQUEUE_TEST_CLOCK_OFFSET": offset}
    print(f"host clock {offset} through {'libfaketime' if 'FAKETIME' in env else 'tests/chaos/skew.py'}")
    return {**FAST, **env}


@pytest.mark.parametrize("offset", ["+1h", "-10m"])
def test_a_host_whose_clock_is_off_enqueues_scheduled_jobs_on_the_db_clock(start_worker, offset) -> None:
    # One runqueue host whose wall clock is an hour ahead (or ten minutes behind) fires a
    # one-second schedule and drains its jobs. The slots, the ledger, and the jobs'
    # queue_run_at and queue_enqueued_at all come from the database's clock: every job is due
    # when its slot fires and runs at once. Before, the jobs of a host an hour ahead waited
    # an hour (READY after the drain), and a host behind wrote enqueue times in the past.
    now = timezone.now()
    schedule = Schedule.objects.create(name="tick", every=1, target="message:test.echo", next_due=now)
    host = start_worker("django_dbqueue.Message", "--concurrency", "1", extra_env=skewed(offset))
    assert wait_until(lambda: ScheduleFiring.objects.filter(schedule=schedule).count() >= 5, timeout=60)

    def drained() -> bool:
        return not Message.objects.exclude(queue_state=QueueState.SUCCEEDED).exists()

    drained_in_time = wait_until(drained, timeout=20)
    host.signal(signal.SIGTERM)
    assert host.wait(timeout=60) == 0, host.output
    firings = list(ScheduleFiring.objects.filter(schedule=schedule))
    jobs = Message.objects.in_bulk([int(f.job.rsplit(":", 1)[1]) for f in firings])
    worst = timedelta(0)
    for firing in firings:
        job = jobs[int(firing.job.rsplit(":", 1)[1])]
        # fired_at is the database's time of the tick; the job was inserted in its transaction.
        for when in (job.queue_enqueued_at, job.queue_run_at):
            worst = max(worst, abs(when - firing.fired_at))
    print(f"{len(firings)} firings; job times at most {worst.total_seconds():.3f}s off the ledger's")
    assert worst < timedelta(seconds=2), worst
    assert drained_in_time, list(Message.objects.values_list("queue_state", "queue_run_at"))
