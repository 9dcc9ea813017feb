"""What the Spark test modules share: the skip rule, one SparkSession for the whole run, and
attempt-history rows with known timings written through the ORM.

``tests/conftest.py`` imports the fixtures, so every test module can ask for them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import pytest
from django.apps import apps
from django.db import connection

from django_dbqueue.compat import UTC
from django_dbqueue.conf import settings as dbqueue_settings


def _missing() -> str | None:
    if not os.environ.get("DATABASE_URL", "").startswith("mysql"):
        return "the Spark pipeline targets MySQL/MariaDB (DATABASE_URL is not mysql://)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[dev]')"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java runtime (apt-get install default-jre-headless)"
    if not os.path.isfile(dbqueue_settings.SPARK_JDBC_JAR):
        return f"no MariaDB JDBC jar at {dbqueue_settings.SPARK_JDBC_JAR} (apt-get install libmariadb-java)"
    return None


def spark_marks() -> list[pytest.MarkDecorator]:
    """The marks of every Spark test module (called at its import, once settings are loaded)."""
    missing = _missing()
    return [
        pytest.mark.spark,
        pytest.mark.skipif(missing is not None, reason=missing or ""),
        pytest.mark.django_db(transaction=True),
    ]


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from django_dbqueue.spark import spark_session

    session = spark_session("local[2]", driver_memory="1g", log_level="ERROR")
    yield session
    session.stop()


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT UTC_TIMESTAMP(6)")
        return cursor.fetchone()[0].replace(tzinfo=UTC)


def attempt(
    model: str,
    object_id: Any,
    number: int,
    *,
    enqueued: datetime,
    due: datetime | None,
    claimed: datetime,
    finished: datetime,
    outcome: str = "succeeded",
    error: str = "",
    worker: str = "w1",
) -> dict[str, Any]:
    """One attempt-history row, as QueueAttempt's fields."""
    return {
        "model": model,
        "object_id": str(object_id),
        "attempt": number,
        "worker_id": worker,
        "enqueued_at": enqueued,
        "due_at": due,
        "claimed_at": claimed,
        "finished_at": finished,
        "outcome": outcome,
        "error": error,
    }


@pytest.fixture
def attempt_history() -> Iterator[Callable[[Iterable[dict[str, Any]]], None]]:
    """``attempt_history(rows)`` writes attempt rows (from :func:`attempt`) into the real history
    table; they are deleted afterwards."""
    model = apps.get_model("django_dbqueue", "QueueAttempt")

    def add(rows: Iterable[dict[str, Any]]) -> None:
        model.objects.bulk_create([model(**row) for row in rows], batch_size=2_000)

    yield add
    model.objects.all().delete()
