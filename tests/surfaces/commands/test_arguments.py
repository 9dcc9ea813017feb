"""Command-line values are checked up front (issue 21, items 6 and 7): a value out of range, NaN,
infinite, negative or a name with a trailing newline gets a CommandError and nothing is done."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_dbqueue.states import QueueState
from tests.testapp.models import Job

pytestmark = pytest.mark.django_db(transaction=True)
# By app registry: the modules that define them move in the core's rebuild (models/ package).
Message = apps.get_model("django_dbqueue", "Message")
QueueAttempt = apps.get_model("django_dbqueue", "QueueAttempt")

# -- runqueue ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lease", "1e-7"], "from 1 to 604800 (7 days), got 1e-7"),
        (["--lease", "0.5"], "from 1 to 604800"),
        (["--lease", "3e11"], "from 1 to 604800"),
        (["--lease", "604801"], "from 1 to 604800"),
        (["--lease", "nan"], "positive number of seconds"),
        (["--lease=-inf"], "positive number of seconds"),
        (["--lease", "-5"], "positive number of seconds"),
        (["--poll-interval", "1e300"], "from 0.01 to 3600 (1 hour), got 1e300"),
        (["--poll-interval", "0.001"], "from 0.01 to 3600"),
        (["--poll-interval", "nan"], "from 0.01 to 3600"),
        (["--poll-interval", "inf"], "from 0.01 to 3600"),
        (["--poll-interval", "-1"], "from 0.01 to 3600"),
        (["--batch-size", "100001"], "between 1 and 100000"),
        (["--batch-size", str(10**30)], "between 1 and 100000"),
        (["--batch-size", "nan"], "not a whole number"),
        (["--max-jobs", "-1"], "at least 1"),
        (["--concurrency", "inf"], "not a whole number"),
        (["--worker-id", "w1\n"], "letters, digits"),
        (["--queue", "emails\n"], "letters, digits"),
    ],
)
def test_runqueue_refuses_bad_values_before_doing_anything(args, message) -> None:
    job = Job.objects.create(name="waits")
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_command("runqueue", "testapp.Job", "--burst", "--no-progress", *args)
    job.refresh_from_db()
    assert (job.queue_state, job.queue_attempts) == (QueueState.READY, 0)


def test_runqueue_bounds_are_inclusive() -> None:
    from django_dbqueue.management.arguments import lease_seconds, poll_seconds

    assert (lease_seconds("1"), lease_seconds("604800")) == (1.0, 604800.0)
    assert (poll_seconds("0.01"), poll_seconds("3600")) == (0.01, 3600.0)


# -- purgequeue --------------------------------------------------------------------------------


def old_rows() -> tuple[int, int]:
    """Finished messages and attempts from 10 days ago: what a purge would delete."""
    Message.objects.publish_many([{"kind": "test.echo", "payload": {"i": i}} for i in range(5)])
    Message.objects.update(queue_state=QueueState.SUCCEEDED, queue_finished_at=timezone.now() - timedelta(10))
    message = Message.objects.first()
    QueueAttempt.objects.bulk_create(
        QueueAttempt(
            model="django_dbqueue.Message",
            object_id=str(message.pk),
            attempt=i + 1,
            worker_id="w",
            outcome="succeeded",
            claimed_at=timezone.now() - timedelta(10),
            finished_at=timezone.now() - timedelta(10),
        )
        for i in range(3)
    )
    return Message.objects.count(), QueueAttempt.objects.count()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--older-than", "99999999999999d"], "too long: at most 365000 days"),
        (["--older-than", "1" + "0" * 400 + "s"], "too long"),  # float overflow: inf
        (["--older-than", "365001d"], "too long"),
        (["--older-than", "7d\n"], None),  # stripped: a duration, valid (a control case)
        (["--attempts-older-than", "99999999999999d"], "too long: at most 365000 days"),
        (["--attempts-older-than", "52143w"], "too long"),
        (["--older-than", "1d", "--pause", "nan"], "number of seconds from 0 to 3600"),
        (["--older-than", "1d", "--pause", "inf"], "number of seconds from 0 to 3600"),
        (["--older-than", "1d", "--pause", "-1"], "number of seconds from 0 to 3600"),
        (["--older-than", "1d", "--pause", "3601"], "number of seconds from 0 to 3600"),
        (["--attempts-older-than", "1d", "--pause", "nan"], "number of seconds from 0 to 3600"),
    ],
)
def test_purgequeue_refuses_bad_values_before_deleting_anything(args, message) -> None:
    before = old_rows()
    if message is None:
        call_command("purgequeue", *args, "--dry-run")
    else:
        with pytest.raises(CommandError, match=message):
            call_command("purgequeue", *args, "--batch-size", "2")
    assert (Message.objects.count(), QueueAttempt.objects.count()) == before


@pytest.mark.parametrize("option", ["--older-than", "--attempts-older-than"])
def test_purgequeue_takes_the_longest_duration_on_every_database(option) -> None:
    # 365000 days before now is still a date every supported database can compute and store.
    before = old_rows()
    call_command("purgequeue", option, "365000d", "--pause", "0")
    assert (Message.objects.count(), QueueAttempt.objects.count()) == before
    call_command("purgequeue", option, "1d", "--pause", "0", "--batch-size", "2")
    assert (Message.objects.count(), QueueAttempt.objects.count()) != before


@pytest.mark.parametrize(
    "command, args",
    [
        ("queuereport", ["--since", "99999999999999d"]),
        ("queuereport", ["--until", "1" + "0" * 400 + "w"]),
        ("queue_spark_enqueue", ["testapp.Job", "--csv", "x.csv", "--key", "name", "--delay", "365001d"]),
    ],
)
def test_other_commands_refuse_durations_too_long(command, args) -> None:
    with pytest.raises(CommandError, match="too long"):
        call_command(command, *args)


# -- names with a trailing newline -------------------------------------------------------------


@pytest.mark.parametrize("queue", ["emails\n", "emails\r\n", "\nemails"])
def test_publish_refuses_a_queue_name_with_a_newline(queue) -> None:
    with pytest.raises(ValueError, match="queue name"):
        Message.objects.publish("test.echo", {}, queue=queue)
    with pytest.raises(ValueError, match="queue name"):
        Message.objects.publish_many([{"kind": "test.echo", "payload": {}, "queue": queue}])
    assert not Message.objects.exists()


def test_publish_refuses_a_kind_with_a_trailing_newline() -> None:
    with pytest.raises(ValueError, match="message kind"):
        Message.objects.publish("rel.echo\n", {})
    with pytest.raises(ValueError, match="message kind"):
        Message.objects.publish_many([{"kind": "rel.echo\n", "payload": {}}])
    assert not Message.objects.exists()
    Message.objects.publish("rel.echo", {}, queue="emails")  # the same names without it: fine
    assert Message.objects.get().queue == "emails"


def test_a_handler_kind_with_a_trailing_newline_is_refused() -> None:
    from django_dbqueue.messaging.handlers import handler

    with pytest.raises(ValueError, match="handler kind"):
        handler("rel.echo\n")


def test_spark_model_labels_refuse_a_trailing_newline() -> None:
    # The history reader checks model labels with it; its entry point needs Spark, so the
    # pattern is tested here.
    from django_dbqueue.spark.read import _LABEL

    assert _LABEL.match("testapp.Job") and not _LABEL.match("testapp.Job\n")


def test_no_pattern_of_the_package_ends_in_a_bare_dollar() -> None:
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[3] / "django_dbqueue"
    found = [
        f"{path.name}: {line.strip()}"
        for path in package.rglob("*.py")
        for line in path.read_text().splitlines()
        if re.search(r"re\.(compile|match|fullmatch|search)\(r?[\"'].*\$[\"']", line)
    ]
    assert found == []
