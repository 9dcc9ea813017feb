"""A first run's set-up mistakes get a system check with the fix (issue 34, items 9 and 10),
not a crash on the first admin page or a worker that fails a fifth of its attempts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks

ROOT = Path(__file__).resolve().parents[3]


def manage_check(tmp_path: Path, **pitfalls: str) -> subprocess.CompletedProcess[str]:
    """``manage.py check`` in a process of its own, on settings with ``pitfalls``."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'check.sqlite3'}",
        **{f"DBQUEUE_TEST_PITFALL_{name.upper()}": value for name, value in pitfalls.items()},
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "check", "--settings", "tests.settings_pitfalls"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_rangefilter_missing_is_a_check_error_with_the_fix(tmp_path: Path) -> None:
    done = manage_check(tmp_path, rangefilter="1")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "django_dbqueue.E008" in done.stderr, done.stderr[-2000:]
    assert "HINT: Add 'rangefilter' to INSTALLED_APPS" in done.stderr
    assert "Traceback" not in done.stderr


def test_sqlite_without_immediate_transactions_is_a_check_warning_with_the_fix(tmp_path: Path) -> None:
    done = manage_check(tmp_path, sqlite=str(tmp_path / "deferred.sqlite3"))
    assert done.returncode == 0, done.stderr[-2000:]  # a warning: the check passes
    assert "django_dbqueue.W002" in done.stderr, done.stderr[-2000:]
    assert '"transaction_mode": "IMMEDIATE"' in done.stderr


@pytest.mark.django_db
def test_the_test_settings_have_neither_problem() -> None:
    from django_dbqueue.checks import check_database_settings, check_installed_apps

    # The same check functions on the suite's own settings (MariaDB, PostgreSQL or an
    # IMMEDIATE SQLite), as `manage.py check` runs them: nothing to report.
    found = check_installed_apps() + check_database_settings()
    assert not [m for m in found if m.level >= checks.WARNING], found


def runqueue(tmp_path: Path, settings: str) -> subprocess.CompletedProcess[str]:
    """``runqueue --burst testapp.Job`` on a database nothing was migrated into."""
    empty = tmp_path / "never-migrated.sqlite3"
    empty.touch()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{empty}", "DBQUEUE_TEST_DB_NAME": str(empty)}
    return subprocess.run(
        [sys.executable, "-m", "django", "runqueue", "--settings", settings, "--burst", "testapp.Job"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_runqueue_before_makemigrations_names_the_app_to_make_migrations_for(tmp_path: Path) -> None:
    done = runqueue(tmp_path, "tests.settings_unmigrated")
    assert done.returncode != 0
    assert "the table 'testapp_job' of testapp.Job does not exist" in done.stderr, done.stderr[-2000:]
    assert "run 'manage.py makemigrations testapp', then 'manage.py migrate'" in done.stderr
    assert "Traceback" not in done.stderr


def test_runqueue_before_migrate_says_migrate(tmp_path: Path) -> None:
    # The app has its migrations: only `migrate` is missing.
    done = runqueue(tmp_path, "tests.settings")
    assert done.returncode != 0
    assert "run 'manage.py migrate'" in done.stderr, done.stderr[-2000:]
    assert "makemigrations" not in done.stderr
