"""bench/stmtcount.py, the benchmark's statements per job, counts what the server counts: the
same statements as MariaDB's own per-session ``Questions`` counter, COMMIT and the driver's
``SET autocommit`` included, a multi-row INSERT once, and nothing of the ledger's connections
(MariaDB only: the counter wraps mysqlclient, the driver every benchmarked system uses there).

The counting runs in a child process: it patches mysqlclient's Connection class, which this
test run's own connections must not share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, os, sys, time
from pathlib import Path
from bench import ledger, stmtcount

stmtcount.install()
conn = ledger.connect(os.environ["BENCH_TEST_DB"])  # the test run's database: a temporary table
cur = conn.cursor()


def questions():
    cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
    return int(cur.fetchone()[1]), stmtcount._state["count"]


server_before, counted_before = questions()
cur.execute("CREATE TEMPORARY TABLE t (a INT)")
conn.autocommit(False)
cur.execute("SELECT 1")
cur.executemany("INSERT INTO t (a) VALUES (%s)", [(1,), (2,), (3,)])
conn.commit()
conn.autocommit(False)  # already off: mysqlclient sends nothing
conn.rollback()
conn.autocommit(True)
server_after, counted_after = questions()
ledger.connect(None, counted=False).cursor().execute("SELECT 2")  # the ledger's: not counted
folder = Path(os.environ["BENCH_COUNT_STATEMENTS"])
deadline = time.monotonic() + 10
while stmtcount.total(folder) != counted_after and time.monotonic() < deadline:
    time.sleep(0.05)  # the writer thread's next write
print(json.dumps({
    "server": server_after - server_before,
    "counted": counted_after - counted_before,
    "file": stmtcount.kinds(folder),
}))
"""


@pytest.mark.django_db
@pytest.mark.databases("mysql", reason="the counter wraps mysqlclient, MariaDB's driver")
def test_the_counter_counts_what_the_server_counts(tmp_path: Path):
    if connection.vendor != "mysql" or not connection.mysql_is_mariadb:
        pytest.skip("the counter wraps mysqlclient, MariaDB's driver")
    settings = connection.settings_dict
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BENCH_DB_HOST": settings["HOST"] or "127.0.0.1",
        "BENCH_DB_PORT": str(settings["PORT"] or 3306),
        "BENCH_DB_USER": settings["USER"],
        "BENCH_DB_PASSWORD": settings["PASSWORD"],
        "BENCH_COUNT_STATEMENTS": str(tmp_path),
        "BENCH_TEST_DB": settings["NAME"],
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    # CREATE, SET autocommit=0, SELECT, one multi-row INSERT, COMMIT, ROLLBACK,
    # SET autocommit=1 and the second SHOW: what the session's Questions counted too.
    assert found["counted"] == found["server"] == 8
    assert found["file"] == {
        "SHOW": 2,
        "CREATE": 1,
        "SET autocommit": 2,
        "SELECT": 1,
        "INSERT": 1,
        "COMMIT": 1,
        "ROLLBACK": 1,
    }
