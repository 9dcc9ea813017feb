"""Every ``DBQUEUE_*`` setting is checked (issue 20, defect 17); ``runqueue`` refuses to start on
settings that fail, instead of crash-looping its workers (DESIGN.md invariant 6)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_dbqueue.conf import Kind, Settings
from django_dbqueue.retry import ExponentialBackoff, NoRetry
from django_dbqueue.settings_checks import check_settings, value_problem
from django_dbqueue.states import QueueState
from tests.testapp.models import Job

# `check` runs the models' checks too, and Django's JSONField check asks the database whether it
# supports JSON (a query, on first use in the process): without the mark, this file alone fails.
pytestmark = pytest.mark.django_db

PACKAGE = Path(__file__).resolve().parents[3] / "django_dbqueue"

BAD = [
    ("DBQUEUE_TASK_RETRY", 5, "django_dbqueue.E022"),
    ("DBQUEUE_TASK_RETRY", "NoRetry()", "django_dbqueue.E022"),
    ("DBQUEUE_TASK_RETRY", ExponentialBackoff, "django_dbqueue.E022"),  # the class, not an instance
    ("DBQUEUE_BATCH_SIZE", 2.5, "django_dbqueue.E020"),
    ("DBQUEUE_BATCH_SIZE", True, "django_dbqueue.E020"),
    ("DBQUEUE_BATCH_SIZE", 10**30, "django_dbqueue.E020"),
    ("DBQUEUE_RESCUE_LIMIT", -1, "django_dbqueue.E020"),
    ("DBQUEUE_MAX_ERROR_LENGTH", -20, "django_dbqueue.E020"),
    ("DBQUEUE_MAX_PAYLOAD_BYTES", -1, "django_dbqueue.E020"),
    ("DBQUEUE_MAX_PAYLOAD_BYTES", "1000", "django_dbqueue.E020"),
    ("DBQUEUE_DEADLOCK_RETRIES", -1, "django_dbqueue.E020"),
    ("DBQUEUE_HISTORY", "no", "django_dbqueue.E021"),
    ("DBQUEUE_HISTORY", 0, "django_dbqueue.E021"),
    ("DBQUEUE_LEASE", 1e-7, "django_dbqueue.E006"),
    ("DBQUEUE_LEASE", 3e11, "django_dbqueue.E006"),
    ("DBQUEUE_LEASE", math.nan, "django_dbqueue.E006"),
    ("DBQUEUE_LEASE", 10**400, "django_dbqueue.E006"),
    ("DBQUEUE_POLL_INTERVAL", 1e300, "django_dbqueue.E006"),
    ("DBQUEUE_POLL_INTERVAL", math.inf, "django_dbqueue.E006"),
    ("DBQUEUE_HEARTBEAT_INTERVAL", "10", "django_dbqueue.E006"),
    ("DBQUEUE_FLUSH_INTERVAL", -1.0, "django_dbqueue.E006"),
    ("DBQUEUE_RESCUE_INTERVAL", False, "django_dbqueue.E006"),
    ("DBQUEUE_ATOMIC_IDLE_TIMEOUT", -1, "django_dbqueue.E006"),
    ("DBQUEUE_ATOMIC_IDLE_TIMEOUT", "60", "django_dbqueue.E006"),
    ("DBQUEUE_SPARK_JDBC_JAR", "", "django_dbqueue.E023"),
    ("DBQUEUE_SPARK_JDBC_JAR", None, "django_dbqueue.E023"),
    ("DBQUEUE_HISTORY_PARTITIONS", "weekly", "django_dbqueue.E024"),
    ("DBQUEUE_HISTORY_PARTITIONS", True, "django_dbqueue.E024"),
    ("DBQUEUE_HISTORY_PARTITIONS_AHEAD", 0, "django_dbqueue.E020"),
    ("DBQUEUE_SCHEDULE_TARGETS", "message:test.echo", "django_dbqueue.E053"),
    ("DBQUEUE_SCHEDULE_TARGETS", [("task", "x")], "django_dbqueue.E053"),
]


@pytest.mark.parametrize("name, value, check_id", BAD, ids=[f"{n[8:]}={v!r}"[:40] for n, v, _ in BAD])
def test_a_bad_setting_is_reported_with_its_name_and_id(name, value, check_id) -> None:
    with override_settings(**{name: value}):
        [message] = check_settings()
        assert (message.id, message.level) == (check_id, 40)  # an Error
        assert message.msg.startswith(f"{name} must be ") and repr(value) in message.msg
        assert f"Remove {name}" in message.hint
        with pytest.raises(SystemCheckError, match=re.escape(check_id)):
            call_command("check")


@pytest.mark.parametrize(
    "name, value",
    [
        ("DBQUEUE_LEASE", 60),
        ("DBQUEUE_LEASE", 7 * 86400),
        ("DBQUEUE_POLL_INTERVAL", 0.01),
        ("DBQUEUE_BATCH_SIZE", 1),
        ("DBQUEUE_DEADLOCK_RETRIES", 0),
        ("DBQUEUE_HISTORY", False),
        ("DBQUEUE_ATOMIC_IDLE_TIMEOUT", None),
        ("DBQUEUE_ATOMIC_IDLE_TIMEOUT", 0),
        ("DBQUEUE_ATOMIC_IDLE_TIMEOUT", 90.5),
        ("DBQUEUE_TASK_RETRY", NoRetry()),
        ("DBQUEUE_TASK_RETRY", ExponentialBackoff(max_attempts=5)),
        ("DBQUEUE_SPARK_JDBC_JAR", Path("/opt/jars/mariadb-java-client.jar")),
        ("DBQUEUE_HISTORY_PARTITIONS", "daily"),
        ("DBQUEUE_HISTORY_PARTITIONS", "monthly"),
        ("DBQUEUE_SCHEDULE_TARGETS", ["message:test.echo"]),
    ],
)
def test_good_values_pass(name, value) -> None:
    with override_settings(**{name: value}):
        assert check_settings() == []


def test_every_default_passes_its_own_declaration() -> None:
    assert {name: value_problem(s, s.default) for name, s in Settings.declared().items()} == dict.fromkeys(
        Settings.declared()
    )


def test_every_declared_setting_is_checked() -> None:
    # A value no setting accepts: each declared setting must report it.
    junk = object()
    with override_settings(**dict.fromkeys(Settings.declared(), junk)):
        reported = {m.msg.split()[0] for m in check_settings() if m.is_serious()}
    assert reported == set(Settings.declared())


def test_every_setting_the_package_reads_is_declared() -> None:
    read = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if re.search(r"from (\.+|django_dbqueue\.)conf import .*\bsettings\b", text):
            read |= set(re.findall(r"\bsettings\.([A-Z][A-Z0-9_]*)\b", text))
    assert read, "the scan found no reads: it is broken"
    assert read - {name.removeprefix("DBQUEUE_") for name in Settings.declared()} == set()


def test_settings_read_lazily_through_the_declarations() -> None:
    from django_dbqueue.conf import settings

    assert settings.BATCH_SIZE == Settings.BATCH_SIZE.default == 500
    with override_settings(DBQUEUE_BATCH_SIZE=40):
        assert settings.BATCH_SIZE == 40
    assert Settings.BATCH_SIZE.kind is Kind.WHOLE and (Settings.BATCH_SIZE.low, Settings.BATCH_SIZE.high)


@pytest.mark.parametrize(
    "typo, closest",
    [
        ("DBQUEUE_BATCHSIZE", "DBQUEUE_BATCH_SIZE"),
        ("DBQUEUE_LEASES", "DBQUEUE_LEASE"),
        ("DBQUEUE_POLL_INTERVALL", "DBQUEUE_POLL_INTERVAL"),
        ("DBQUEUE_HISTROY", "DBQUEUE_HISTORY"),
        ("DBQUEUE_MAX_PAYLOAD_SIZE", "DBQUEUE_MAX_PAYLOAD_BYTES"),
    ],
)
def test_an_unknown_dbqueue_name_gets_a_warning_naming_the_closest_setting(typo, closest) -> None:
    with override_settings(**{typo: 100}):
        [message] = check_settings()
        assert (message.id, message.level) == ("django_dbqueue.W020", 30)  # a Warning
        assert typo in message.msg and message.hint == f"Did you mean {closest}?"
        call_command("check")  # a warning does not fail check ...
        with pytest.raises(SystemCheckError, match="W020"):
            call_command("check", "--fail-level", "WARNING")  # ... unless asked to


def test_an_unknown_name_far_from_every_setting_lists_the_known_ones() -> None:
    with override_settings(DBQUEUE_ZZZZZZZZZZZZ=1):
        [message] = check_settings()
    assert message.hint.startswith("Known settings: DBQUEUE_ATOMIC_IDLE_TIMEOUT, DBQUEUE_BATCH_SECONDS")


# -- runqueue refuses to start ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_runqueue_refuses_to_start_and_lists_every_failed_setting() -> None:
    job = Job.objects.create(name="waits")
    with (
        override_settings(DBQUEUE_TASK_RETRY=5, DBQUEUE_BATCH_SIZE=2.5, DBQUEUE_HISTORY="no"),
        pytest.raises(CommandError, match="runqueue will not start") as caught,
    ):
        call_command("runqueue", "testapp.Job", "--burst", "--no-progress")
    text = str(caught.value)
    for check_id, name in [("E022", "TASK_RETRY"), ("E020", "BATCH_SIZE"), ("E021", "HISTORY")]:
        assert f"django_dbqueue.{check_id}: DBQUEUE_{name} must be" in text
    job.refresh_from_db()
    assert (job.queue_state, job.queue_attempts) == (QueueState.READY, 0)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "line, check_id",
    [("DBQUEUE_BATCH_SIZE = 2.5", "E020"), ("DBQUEUE_TASK_RETRY = 5", "E022")],
    ids=["batch-size", "task-retry"],
)
def test_runqueue_process_exits_1_at_once_on_a_bad_setting(start_worker, tmp_path, line, check_id) -> None:
    job = Job.objects.create(name="waits")
    started = time.monotonic()
    worker = start_worker(
        "--burst", "--concurrency", "2", *settings_with(tmp_path, line), extra_env=on_path(tmp_path)
    )
    assert worker.wait(timeout=60) == 1, worker.output
    assert time.monotonic() - started < 30
    assert f"django_dbqueue.{check_id}" in worker.output and "Traceback" not in worker.output
    job.refresh_from_db()
    assert (job.queue_state, job.queue_attempts) == (QueueState.READY, 0)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_runqueue_process_runs_with_a_warning_only(start_worker, tmp_path) -> None:
    job = Job.objects.create(name="runs")
    variant = settings_with(tmp_path, "DBQUEUE_BATCHSIZE = 10")
    worker = start_worker("testapp.Job", "--burst", *variant, extra_env=on_path(tmp_path))
    assert worker.wait(timeout=60) == 0, worker.output
    assert "django_dbqueue.W020" in worker.output and "Did you mean DBQUEUE_BATCH_SIZE?" in worker.output
    job.refresh_from_db()
    assert job.queue_state == QueueState.SUCCEEDED


def settings_with(folder: Path, line: str) -> list[str]:
    """``start_worker`` arguments for the test settings plus ``line``."""
    (folder / "dbqueue_settings_variant.py").write_text(f"from tests.settings import *  # noqa\n{line}\n")
    return ["--settings", "dbqueue_settings_variant"]


def on_path(folder: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(folder)}
