"""The Spark pipeline demonstrated on the example shop (docs/spark.md, "Try it on the example
shop"), run as a user would: its own MariaDB database, manage.py commands in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from tests.spark_support import spark_marks

pytestmark = [*spark_marks(), pytest.mark.processes]

EXAMPLE = Path(__file__).resolve().parents[3] / "example_project"
# 20 customers, 2 in the demo's blocked country; the worker drains the syncs, waiting out
# the retries' backoff like shopdemo does.
SETUP = """
from shop.models import Customer
Customer.objects.bulk_create(
    [Customer(name=f"customer {i}") for i in range(20)]
    + [Customer(name=f"blocked {i}", country="XX") for i in range(2)]
)
"""
DRAIN = """
import time
from django.core.management import call_command
from shop.models import CustomerSync
for _ in range(100):
    call_command("runqueue", "shop.CustomerSync", "--burst", verbosity=0)
    if not CustomerSync.objects.filter(queue_state="ready").exists():
        break
    time.sleep(0.3)
print(sorted(CustomerSync.objects.values_list("queue_state", flat=True)))
"""


@pytest.fixture
def example_db() -> Iterator[str]:
    """A database of its own for the example project, on this test run's server."""
    db = connection.settings_dict
    name = f"{db['NAME']}_example"
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {qn(name)}")
        cursor.execute(f"CREATE DATABASE {qn(name)} CHARACTER SET utf8mb4")
    auth = quote(db["USER"] or "root") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    yield f"mysql://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 3306}/{name}"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {qn(name)}")


def _manage(url: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_example_shop_bulk_enqueues_with_spark_and_reports(example_db, tmp_path):
    _manage(example_db, "migrate", "-v0")
    _manage(example_db, "shell", "-v0", "-c", SETUP)
    enqueue = [
        "queue_spark_enqueue",
        "shop.CustomerSync",
        "--table",
        "shop_customer",
        "--columns",
        "id:customer",
    ]
    first = _manage(example_db, *enqueue, "--master", "local[1]")
    assert "shop.CustomerSync: 22 inserted, 0 already queued (of 22 rows)" in first
    again = _manage(example_db, *enqueue, "--master", "local[1]")
    assert "shop.CustomerSync: 0 inserted, 22 already queued (of 22 rows)" in again

    states = _manage(example_db, "shell", "-v0", "-c", DRAIN)
    assert states.strip() == str(["failed"] * 2 + ["succeeded"] * 20)

    out = tmp_path / "report"
    report = _manage(example_db, "queuereport", "--out", str(out), "--master", "local[1]")
    # 20 first-time successes; the 2 blocked customers tried 3 times each.
    assert "shop.CustomerSync: 26 attempts, 22 jobs" in report
    markdown = (out / "report.md").read_text()
    # Six rejections of two customers: one error group, the customer ids masked.
    assert (
        "| shop.CustomerSync | 6 | shop.models.CrmRejected | `CRM rejected customer <n>: country 'XX'` | 2 |"
        in (markdown)
    )
