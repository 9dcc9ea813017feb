"""``manage.py queuestatus``: its table, its rates from the history, ``--watch``, bad input."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_dbqueue.models import QueueAttempt
from django_dbqueue.queue.history import AttemptOutcome
from django_dbqueue.states import QueueState
from django_dbqueue.worker import registry
from tests.testapp.models import Job, Ticket

pytestmark = pytest.mark.django_db


def status(*args: str) -> str:
    out = io.StringIO()
    call_command("queuestatus", *args, stdout=out)
    return out.getvalue()


def test_the_table_per_model() -> None:
    Job.objects.bulk_create([Job(name=str(i)) for i in range(4)])
    Job.objects.create(name="waiting", queue_run_at=timezone.now() - timedelta(minutes=3))
    Job.objects.create(name="r", queue_state=QueueState.RUNNING)
    Job.objects.create(name="f", queue_state=QueueState.FAILED)
    now = timezone.now()
    QueueAttempt.objects.bulk_create(
        QueueAttempt(model="testapp.Job", object_id=str(i), attempt=1, finished_at=now, outcome=outcome)
        for i, outcome in enumerate([AttemptOutcome.SUCCEEDED] * 10 + [AttemptOutcome.RETRIED] * 5)
    )
    registry.register("host:7", [Job], "default")
    text = status("testapp.Job", "testapp.Ticket")
    header, job, ticket = text.splitlines()[:3]
    assert header.split()[:4] == ["queue", "model", "ready", "running"]
    cells = re.split(r"\s{2,}", job)
    assert cells[0] == "testapp.Job" and cells[1:4] == ["5", "1", "1"]
    assert cells[4].startswith("0:03:") or cells[4].startswith("0:02:5")  # the oldest due row
    assert cells[5:] == ["2.0", "1.0", "1"]  # 10 and 5 over five minutes; one worker
    assert re.split(r"\s{2,}", ticket)[1:4] == ["0", "0", "0"]
    assert "workers alive: 1 (host:7)" in text


def test_watch_refreshes(capsys) -> None:
    Ticket.objects.create(subject="a")
    text = status("testapp.Ticket", "--watch", "--interval", "0.1", "--count", "3")
    assert text.count("queue model") == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.Model"], "Unknown model"),
        (["testapp.Ledger"], "not a concrete QueueMixin model"),
        (["--interval", "0"], "interval"),
        (["--count", "2"], "--count is for --watch"),
        (["--database", "elsewhere"], "Unknown database alias"),
    ],
)
def test_bad_input_is_refused(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        status(*args)
