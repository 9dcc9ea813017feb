"""A ``spark-submit`` driver script: ``enqueue_dataframe`` of generated accounts into
``sparkapp.AccountSync`` (fresh, then ``--repeat`` more times: idempotent re-runs), optionally
``queue_report`` over the attempt history, then one JSON line with what happened.

It sets Django up itself, as docs/spark.md says a driver script must (``DJANGO_SETTINGS_MODULE``
then ``django.setup()`` before ``django_dbqueue.spark``), and takes the master from
``spark-submit`` (``spark_session(None)``). Run by ``tests/surfaces/spark/test_spark_cluster.py`` and
``bench/spark_cluster_bench.py``::

    DATABASE_URL=mysql://root@127.0.0.1:3306/sparkc_x spark-submit --master spark://127.0.0.1:7077 \\
        --jars /usr/share/java/mariadb-java-client.jar tests/spark_cluster_job.py --last 20000
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

# spark-submit puts this script's folder on sys.path; the project (the settings module) is one up.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django_dbqueue.spark import enqueue_dataframe, queue_report, spark_session  # noqa: E402
from tests.sparkapp.models import AccountSync  # noqa: E402

#: The line the caller looks for in the driver's stdout.
RESULT_PREFIX = "SPARK_CLUSTER_JOB "


def _probe(_rows: Any) -> Any:
    """Runs in an executor's Python worker: where ``django_dbqueue`` comes from there."""
    import django_dbqueue

    yield {"host": socket.gethostname(), "pid": os.getpid(), "package": django_dbqueue.__file__}


def _executors(spark: Any) -> list[dict[str, Any]]:
    """The application's executors and their task counts, from the driver's REST API."""
    url = spark.sparkContext.uiWebUrl
    if not url:  # local[*] with the UI off: the driver is the only executor
        return []
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/executors", timeout=120) as response:
        return [
            {key: e[key] for key in ("id", "hostPort", "totalTasks", "completedTasks", "failedTasks")}
            for e in json.load(response)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--first", type=int, default=1, help="First account id.")
    parser.add_argument("--last", type=int, required=True, help="Last account id.")
    parser.add_argument("--partitions", type=int, default=4, help="Partitions of the DataFrame.")
    parser.add_argument("--repeat", type=int, default=0, help="Idempotent re-runs after the first.")
    parser.add_argument("--report", metavar="DIR", help="Run queue_report into DIR.")
    parser.add_argument("--probe-python", action="store_true", help="Import the package on executors.")
    args = parser.parse_args()

    t0 = time.perf_counter()
    spark = spark_session(None, app_name="dbqueue-cluster-job", driver_memory=None, log_level="ERROR")
    from pyspark.sql import functions as sf

    started = time.perf_counter() - t0
    # Generated on the executors, not shipped from the driver. The e-mail is zero-padded so its
    # order is the id's order (the benchmark measures the pipeline, not random index inserts).
    source = spark.range(args.first, args.last + 1, numPartitions=args.partitions).select(
        sf.col("id").alias("account_id"),
        sf.format_string("user%010d@example.com", sf.col("id")).alias("email"),
    )
    runs = []
    for _ in range(1 + args.repeat):
        t1 = time.perf_counter()
        result = enqueue_dataframe(source, AccountSync)
        runs.append(
            {
                "seconds": time.perf_counter() - t1,
                "rows": result.rows,
                "inserted": result.inserted,
                "skipped": result.skipped,
                "chunks": result.chunks,
                "stage_seconds": result.stage_seconds,
                "insert_seconds": result.insert_seconds,
            }
        )
    report = None
    if args.report:
        t1 = time.perf_counter()
        done = queue_report(spark, out=args.report)
        report = {"seconds": time.perf_counter() - t1, "files": sorted(done.files)}
    probes = []
    if args.probe_python:
        workers = spark.sparkContext.defaultParallelism
        probes = spark.sparkContext.parallelize(range(workers), workers).mapPartitions(_probe).collect()
    out = {
        "app_id": spark.sparkContext.applicationId,
        "master": spark.sparkContext.master,
        "default_parallelism": spark.sparkContext.defaultParallelism,
        "session_seconds": started,
        "jars": spark.sparkContext.getConf().get("spark.jars"),
        "runs": runs,
        "report": report,
        "executors": _executors(spark),
        "probes": probes,
    }
    spark.stop()
    print(RESULT_PREFIX + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
