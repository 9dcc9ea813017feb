"""bench/atomic_ceiling.py, the raw-SQL study behind atomic mode's figures in the README, still
runs and its checks still hold: every job's handler once, every row SUCCEEDED, one attempt row
per job where a mode writes them (MariaDB only: it measures MariaDB's anonymous blocks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.django_db
@pytest.mark.databases("mysql", reason="the study sends MariaDB's BEGIN NOT ATOMIC blocks")
def test_every_mode_runs_and_checks_its_jobs():
    if connection.vendor != "mysql" or not connection.mysql_is_mariadb:
        pytest.skip("the study sends MariaDB's BEGIN NOT ATOMIC blocks")
    settings = connection.settings_dict
    env = {
        **os.environ,
        "BENCH_DB_HOST": settings["HOST"] or "127.0.0.1",
        "BENCH_DB_PORT": str(settings["PORT"] or 3306),
        "BENCH_DB_USER": settings["USER"],
        "BENCH_DB_PASSWORD": settings["PASSWORD"],
        # Databases of the test run's own (named after its test database: the passes of
        # `make test` run side by side on one server), never those of a study someone runs.
        "BENCH_CEILING_DB": f"{settings['NAME']}_ceiling",
        "BENCH_LEDGER_DB": f"{settings['NAME']}_ceiling_ledger",
    }
    result = subprocess.run(
        [sys.executable, "bench/atomic_ceiling.py", "--procs", "1,2", "--rounds", "1", "--jobs", "300"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = {
        line.split("|")[1].strip(): line
        for line in result.stdout.splitlines()
        if line.startswith("| ") and "jobs/s" not in line
    }
    assert set(table) == {"ack", "block", "procedure", "statements", "block-no-history"}
    assert "(1.00)" in table["ack"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", "block,nonsense"], "--modes: nonsense"),
        (["--procs", "1,four"], "--procs: whole numbers separated by commas"),
        (["--procs", "0"], "--procs at least 1"),
        (["--procs", "4", "--jobs", "300"], "at least one claim of 100 per process"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], message: str):
    result = subprocess.run(
        [sys.executable, "bench/atomic_ceiling.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
