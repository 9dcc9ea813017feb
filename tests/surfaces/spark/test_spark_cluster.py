"""The pipeline on a Spark standalone cluster: a master and two workers started from the PySpark
distribution (tests/spark_cluster.py), jobs submitted with ``spark-submit --master spark://…
--jars <the MariaDB jar> --py-files <the package as a zip>`` into this run's MariaDB test
database, and ``manage.py queuereport --master spark://…`` (client mode, no spark-submit).

What it proves: ``enqueue_dataframe`` from a driver script that sets Django up itself, its
idempotent re-run in a second application (no duplicates), the history report, and that the
work ran on executors of both workers (the master's and the workers' JSON, the driver's REST
API), with the package shipped to the executors' Python by ``--py-files``. About two minutes on
an idle 2-core machine (five JVMs: a master, two workers, their executors, the drivers): marked
slow, and the cluster's tests marked ``spark_cluster``, which ``make test-spark-cluster`` runs and
``make test`` leaves out, as it leaves out chaos runs, soaks and benchmarks. The pipeline's code
is the same in local mode, which ``make test`` runs whole (tests/surfaces/spark); what only a
cluster shows is here. The refusal without the JDBC jar (``spark-submit`` in local mode, no
cluster) stays in ``make test``.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_dbqueue.conf import settings as dbqueue_settings
from django_dbqueue.states import QueueState
from tests.spark_cluster import StandaloneCluster, submit_command
from tests.spark_support import attempt, db_now, spark_marks
from tests.sparkapp.models import AccountSync

pytestmark = [*spark_marks(), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "tests" / "spark_cluster_job.py"
RESULT_PREFIX = "SPARK_CLUSTER_JOB "
#: One 1-core executor per worker, and no task before both registered: the work is spread.
CONF = {
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.sql.shuffle.partitions": "4",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    with StandaloneCluster(workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture
def package_zip(tmp_path: Path) -> str:
    """This tree's ``django_dbqueue`` as a zip, what ``--py-files`` ships to the executors."""
    staging = tmp_path / "pyfiles"
    shutil.copytree(
        ROOT / "django_dbqueue", staging / "django_dbqueue", ignore=shutil.ignore_patterns("__pycache__")
    )
    return shutil.make_archive(str(tmp_path / "django_dbqueue"), "zip", staging)


def _job_env() -> dict[str, str]:
    return {
        "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "SPARK_CONF_DIR": str(ROOT / "django_dbqueue" / "sparkconf"),  # errors only
    }


def _submit(
    cluster: StandaloneCluster, package_zip: str, *args: str, jars: list[str] | None = None
) -> dict[str, Any]:
    done = cluster.submit(
        JOB,
        *args,
        conf=CONF,
        jars=jars or [dbqueue_settings.SPARK_JDBC_JAR],
        py_files=[package_zip],
        env=_job_env(),
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def _ran_on_both_workers(cluster: StandaloneCluster, app_id: str, executors: list[dict[str, Any]]) -> None:
    (app,) = [a for a in cluster.state()["completedapps"] if a["id"] == app_id]
    assert app["state"] == "FINISHED"
    per_worker = cluster.executors_of(app_id)
    assert len(per_worker) == 2 and all(len(found) == 1 for found in per_worker.values()), per_worker
    # The driver's own view: two executors besides itself, each of which ran tasks, none failed.
    workers = [e for e in executors if e["id"] != "driver"]
    assert len(workers) == 2, executors
    assert all(e["completedTasks"] > 0 and e["failedTasks"] == 0 for e in workers), executors


def _staging_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW TABLES LIKE 'dbqueue\\_stage\\_%%'")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.spark_cluster
def test_enqueue_rerun_and_report_on_a_standalone_cluster(cluster, package_zip, attempt_history, tmp_path):
    # History for the report: 90 first-attempt successes, 10 jobs that failed twice then for good.
    t = db_now() - timedelta(hours=1)
    rows = [
        attempt(
            "sparkapp.AccountSync",
            n,
            1,
            enqueued=t,
            due=t,
            claimed=t + timedelta(seconds=2),
            finished=t + timedelta(seconds=3),
        )
        for n in range(90)
    ]
    for n in range(90, 100):
        for number, outcome in ((1, "retried"), (2, "retried"), (3, "failed")):
            at = t + timedelta(minutes=number)
            rows.append(
                attempt(
                    "sparkapp.AccountSync",
                    n,
                    number,
                    enqueued=t,
                    due=at,
                    claimed=at,
                    finished=at + timedelta(seconds=1),
                    outcome=outcome,
                    error=f"Traceback...\nValueError: account {n} closed\n",
                )
            )
    attempt_history(rows)

    report_dir = tmp_path / "report"
    # Another jar beside the JDBC driver (a jar is a zip): spark_session() keeps spark-submit's --jars.
    extra_jar = str(tmp_path / "extra.jar")
    with zipfile.ZipFile(extra_jar, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    first = _submit(
        cluster,
        package_zip,
        *("--last", "20000", "--report", str(report_dir), "--probe-python"),
        jars=[extra_jar, dbqueue_settings.SPARK_JDBC_JAR],
    )
    assert first["master"] == cluster.master_url
    assert sorted(Path(j).name for j in first["jars"].split(",")) == sorted(
        ["extra.jar", Path(dbqueue_settings.SPARK_JDBC_JAR).name]
    )
    assert [(r["rows"], r["inserted"], r["skipped"]) for r in first["runs"]] == [(20_000, 20_000, 0)]
    _ran_on_both_workers(cluster, first["app_id"], first["executors"])
    # The executors' Python imported the package from the zip --py-files shipped, not the venv.
    assert len(first["probes"]) == 2
    assert all(
        p["package"].endswith("django_dbqueue.zip/django_dbqueue/__init__.py") for p in first["probes"]
    )

    assert AccountSync.objects.count() == 20_000
    assert set(AccountSync.objects.values_list("queue_state", "queue_attempts").distinct()) == {
        (QueueState.READY, 0)
    }
    assert AccountSync.objects.get(account_id=4242).email == "user0000004242@example.com"

    with open(report_dir / "summary.csv", newline="") as f:
        (summary,) = list(csv.DictReader(f))
    assert summary["model"] == "sparkapp.AccountSync"
    assert (summary["attempts"], summary["jobs"], summary["succeeded"], summary["failed"]) == (
        "120",
        "100",
        "90",
        "10",
    )
    assert summary["retried"] == "20" and float(summary["job_failure_rate"]) == pytest.approx(0.1)
    assert "`account <n> closed`" in (report_dir / "report.md").read_text()

    # A second application over 10,000 known and 10,000 new ids, run twice: no duplicates.
    second = _submit(cluster, package_zip, "--first", "10001", "--last", "30000", "--repeat", "1")
    assert [(r["rows"], r["inserted"], r["skipped"]) for r in second["runs"]] == [
        (20_000, 10_000, 10_000),
        (20_000, 0, 20_000),
    ]
    _ran_on_both_workers(cluster, second["app_id"], second["executors"])
    assert AccountSync.objects.count() == 30_000
    assert AccountSync.objects.values("account_id").distinct().count() == 30_000
    assert _staging_tables() == []


def test_spark_submit_without_the_jdbc_jar_is_refused(tmp_path):
    # local[1]: the check is the driver's, before any work. Nothing is staged or inserted.
    done = subprocess.run(
        submit_command(JOB, "--last", "10", master="local[1]"),
        env={**os.environ, **_job_env(), "TZ": "UTC", "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr  # spark-submit passes the Python driver's stderr to its stdout
    assert "spark-submit was not given the JDBC driver: add --jars" in output, output[-3000:]
    assert AccountSync.objects.count() == 0 and _staging_tables() == []


@pytest.mark.spark_cluster
def test_queuereport_command_with_a_spark_master(cluster, attempt_history, tmp_path):
    # The management command in client mode: spark_session() hands the jar and UTC options to the
    # cluster itself; no spark-submit. A second application on the cluster.
    t = db_now() - timedelta(minutes=30)
    attempt_history(
        attempt("sparkapp.AccountSync", n, 1, enqueued=t, due=t, claimed=t, finished=t + timedelta(seconds=1))
        for n in range(50)
    )
    out = tmp_path / "report"
    env = {
        **cluster.env(),
        "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "queuereport", "--master", cluster.master_url, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "sparkapp.AccountSync: 50 attempts, 50 jobs" in done.stdout
    apps = [a for a in cluster.state()["completedapps"] if a["name"] == "queuereport"]
    assert len(apps) == 1 and apps[0]["state"] == "FINISHED"
    assert all(len(found) == 1 for found in cluster.executors_of(apps[0]["id"]).values())
    assert os.path.isfile(out / "report.md")
