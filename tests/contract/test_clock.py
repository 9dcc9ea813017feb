"""One clock (DESIGN.md): what the package writes to a queue column or its own tables comes from
the database server's clock, also in a process whose host clock is an hour ahead.

The host's clock is shifted in this process as a host's wrong clock would be seen by Python:
``django.utils.timezone.now`` (what Django's ``auto_now_add`` and the package read) and the
``default=timezone.now`` the models captured when they were defined. The database is real;
each time written is compared with the database's clock read once after the write.
tests/features/schedules/test_schedule_processes.py runs a whole ``runqueue`` host with a skewed clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.apps import apps
from django.db import models
from django.utils import timezone

from django_dbqueue.backends import read_now
from django_dbqueue.composition import batch
from django_dbqueue.flow import pauses
from django_dbqueue.models import Message
from tests.testapp.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

AHEAD = timedelta(hours=1)
#: How far a time written may be from the database's clock read just after (a loaded machine).
CLOSE = timedelta(seconds=5)


@pytest.fixture
def host_an_hour_ahead(monkeypatch):
    real_now = timezone.now

    def shifted() -> datetime:
        return real_now() + AHEAD

    monkeypatch.setattr(timezone, "now", shifted)
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if field.default is real_now:  # default=timezone.now, captured at class definition
                monkeypatch.setitem(field.__dict__, "_get_default", shifted)
    assert abs(timezone.now() - read_now("default") - AHEAD) < CLOSE
    return shifted


def assert_db_clock(*times: datetime, offset: timedelta = timedelta(0)) -> None:
    now = read_now("default")
    for when in times:
        assert abs(when - offset - now) < CLOSE, f"{when} is not the database's {now} (+ {offset})"


def test_new_rows_take_both_queue_times_from_the_database(host_an_hour_ahead) -> None:
    created = Job.objects.create(name="create")
    saved = Job(name="save")
    saved.save()
    assert Job.objects.bulk_enqueue([Job(name="bulk"), {"name": "bulk2"}]) == 2
    new = Job(name="enqueue")
    new.enqueue()
    published = Message.objects.publish("test.echo", {})
    assert published is not None
    assert Message.objects.publish_many([{"kind": "test.echo"}, {"kind": "test.echo", "key": "k"}]) == 2
    # The instances read the database's values back (or load them when first used).
    assert_db_clock(created.queue_run_at, created.queue_enqueued_at, published.message.queue_enqueued_at)
    rows = [*Job.objects.all(), *Message.objects.all()]
    assert len(rows) == 8
    for row in rows:
        assert_db_clock(row.queue_run_at, row.queue_enqueued_at)


def test_a_delay_counts_from_the_database_clock(host_an_hour_ahead) -> None:
    new = Job(name="later")
    new.enqueue(run_at=timedelta(minutes=5))
    Message.objects.publish("test.echo", {}, run_at=timedelta(minutes=5))
    Message.objects.publish_many([{"kind": "test.echo", "run_at": timedelta(minutes=5)}])
    rows = [*Job.objects.all(), *Message.objects.all()]
    assert len(rows) == 3
    for row in rows:
        assert_db_clock(row.queue_run_at, offset=timedelta(minutes=5))
        assert_db_clock(row.queue_enqueued_at)


def test_a_given_run_at_is_kept(host_an_hour_ahead) -> None:
    when = read_now("default") + timedelta(days=2)
    Job.objects.create(name="given", queue_run_at=when)
    Message.objects.publish("test.echo", {}, run_at=when)
    assert {row.queue_run_at for row in [*Job.objects.all(), *Message.objects.all()]} == {when}


def test_pauses_batches_waits_and_cancel_requests_take_the_database_clock(host_an_hour_ahead) -> None:
    assert pauses.pause(Job, by="test")
    with batch() as opened:
        Job.objects.create(name="member")
    parent = Job.objects.create(name="parent")
    Job(name="child").enqueue(after=[parent])
    running = Job.objects.create(name="running")
    Job.objects.filter(pk__in=[parent.pk]).update(queue_state="succeeded")
    pauses.resume(Job)
    [claimed] = Job.objects.filter(pk=running.pk).claim(1)
    claimed.request_cancel("test")

    def times(label: str, field: str) -> list[datetime]:
        return list(apps.get_model(label)._default_manager.values_list(field, flat=True))

    assert_db_clock(*times("django_dbqueue.Batch", "created_at"))
    assert_db_clock(*times("django_dbqueue.JobWait", "created_at"))
    assert_db_clock(*times("django_dbqueue.CancelRequest", "requested_at"))
    assert pauses.pause(Job, by="test")
    assert_db_clock(*(row.paused_at for row in pauses.pauses()))
    assert opened.pk is not None
    assert isinstance(Job._meta.get_field("queue_run_at"), models.DateTimeField)
