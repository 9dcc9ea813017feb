"""``runqueue --burst`` on a terminal (issue #35): the workers' log lines go above the progress bar,
never into it, and without a terminal there is no bar at all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import run_on_terminal
from tests.testapp.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

ROOT = Path(__file__).resolve().parents[3]
#: A worker's log line about a discarded Job, from the start of the row (whatever the format).
LOGGED = re.compile(r"^(\S+ \S+ \S+ )?(\S+ )?testapp\.Job pk=\d+ FAILED .*not worth retrying$")


def _runqueue(terminal: bool) -> str:
    """A real ``runqueue --burst`` process, its stderr on a pseudo-terminal or a pipe."""
    env = {**os.environ, "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"])}
    command = [sys.executable, "-m", "django", "runqueue", "--settings", "tests.settings", "testapp.Job"]
    command += ["--burst", "--batch-size", "1"]
    if not terminal:
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stderr
    return run_on_terminal(command, env)


def _failing_jobs() -> None:
    # Slow enough for the bar to be drawn between the log lines; every 5th is discarded (a log line).
    Job.objects.bulk_create(
        [Job(name=str(i), sleep=0.05, action="discard" if i % 5 == 0 else "") for i in range(40)]
    )
    connection.close()


def test_log_lines_are_written_above_the_bar_not_into_it() -> None:
    _failing_jobs()
    text = _runqueue(terminal=True)
    assert "draining" in text and "40/40" in text, text[-2000:]
    logged = [line for line in text.split("\n") if "not worth retrying" in line]
    assert len(logged) >= 8, text[-3000:]
    # tqdm.write() clears the bar ("\r   \r") and writes the line from the start of the row: the
    # last carriage-return segment (the terminal ends rows with "\r\n") is the log line alone, not
    # the bar followed by the log line.
    glued = [line for line in logged if not LOGGED.match(line.rstrip("\r").split("\r")[-1])]
    assert not glued, glued[:3]


def test_no_bar_without_a_terminal() -> None:
    _failing_jobs()
    text = _runqueue(terminal=False)
    assert "not worth retrying" in text
    assert "draining" not in text and "\r" not in text
