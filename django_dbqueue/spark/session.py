"""The SparkSession of the pipeline: Java, the JDBC jar, and UTC everywhere.

Connector/J converts DATETIME with the JVM's default zone, Spark shows instants in
``spark.sql.session.timeZone`` and ``collect()`` converts with the Python process's zone, so
all three must be UTC (Django stores naive UTC with USE_TZ). A session from
:func:`spark_session` is; any other session is checked by :func:`check_utc` and refused if its
driver JVM is not.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from ..conf import settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

UTC_NAMES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "Universal", "Zulu"})
#: log4j configuration that silences Spark's start-up chatter (shipped as package data).
SPARK_CONF_DIR = Path(__file__).resolve().parent.parent / "sparkconf"

#: Progress callback of the long-running calls: one human-readable line per step.
Progress = Callable[[str], None]


class SparkUnavailable(ImproperlyConfigured):
    """pyspark, Java or the JDBC driver is missing, or a session is not set up for UTC."""


def require_pyspark() -> Any:
    try:
        import pyspark
    except ImportError:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'django-dbqueue[spark]' (it needs Java 17 or 21)"
        ) from None
    return pyspark


def java_executable() -> str:
    """The ``java`` Spark will start (``$JAVA_HOME/bin/java``, else ``java`` on PATH)."""
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise SparkUnavailable(
            f"Spark needs Java 17 or 21 ({where}): apt-get install default-jre-headless, or set JAVA_HOME"
        )
    return candidate


def jdbc_jar() -> str:
    """The MariaDB Connector/J jar (``DBQUEUE_SPARK_JDBC_JAR``), checked to exist."""
    jar = settings.SPARK_JDBC_JAR
    if not jar or not os.path.isfile(jar):
        raise SparkUnavailable(
            f"MariaDB JDBC driver not found at {jar!r}: apt-get install libmariadb-java, or point "
            "DBQUEUE_SPARK_JDBC_JAR at a mariadb-java-client jar (Spark must never download it)"
        )
    return jar


def _python_utc() -> None:
    # collect() turns TimestampType into naive datetimes of the Python process's zone.
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        time.tzset()


def spark_session(
    master: str | None = "local[*]",
    *,
    app_name: str = "django_dbqueue",
    driver_memory: str | None = "1g",
    config: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession for this pipeline: UTC in the JVM, the session and this process, the
    JDBC jar on the classpath, Python workers on this interpreter.

    ``master=None`` keeps whatever ``spark-submit`` chose. If a session already exists in this
    process, it is reused (Spark ignores start-up options then) and checked for UTC."""
    require_pyspark()
    jar = jdbc_jar()
    java_executable()
    _python_utc()
    # Without it, Python workers run the first python3 on PATH, not this virtualenv.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's start-up chatter (default log4j profile, native-hadoop, hostname warnings) off.
    os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))
    local = master is not None and master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    utc = "-Duser.timezone=UTC"
    options = {
        "spark.driver.extraJavaOptions": utc,
        "spark.executor.extraJavaOptions": utc,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
    }
    # spark-submit (and a pyspark shell) started the JVM already, with its --jars as spark.jars:
    # setting it here would replace them, and the executors would get only what it lists.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        options["spark.jars"] = jar
    if local:
        options |= {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"}
    if driver_memory:
        options["spark.driver.memory"] = driver_memory
    for key, value in (config or {}).items():
        if key.endswith("extraJavaOptions") and "-Duser.timezone=" not in value:
            value = f"{value} {utc}"  # the caller's JVM options, still in UTC
        options[key] = value
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    check_utc(spark)
    if submitted:
        _check_jar_shipped(spark, jar)
    return spark


def _check_jar_shipped(spark: SparkSession, jar: str) -> None:
    """Refuse a spark-submit session whose ``--jars`` lack the JDBC driver (same file name)."""
    shipped = (spark.sparkContext.getConf().get("spark.jars") or "").split(",")
    if not any(os.path.basename(j) == os.path.basename(jar) for j in shipped if j):
        raise SparkUnavailable(
            f"spark-submit was not given the JDBC driver: add --jars {jar} (or a URL of the same "
            "file name the executors can fetch, e.g. local:///opt/jars/mariadb-java-client.jar)"
        )


def check_utc(spark: SparkSession) -> None:
    """Make the session's time zone UTC; refuse a driver JVM whose default zone is not UTC."""
    _python_utc()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        # _jvm is None under Spark Connect: the AttributeError is the except below.
        jvm_zone = spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - Spark Connect has no driver JVM to ask
        return
    if jvm_zone not in UTC_NAMES:
        raise SparkUnavailable(
            f"the Spark driver JVM runs in {jvm_zone}, not UTC: DATETIME values would shift by its offset. "
            "Start Spark with --conf spark.driver.extraJavaOptions=-Duser.timezone=UTC "
            "--conf spark.executor.extraJavaOptions=-Duser.timezone=UTC (spark_session() does)"
        )
