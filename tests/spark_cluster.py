"""A Spark standalone cluster on this machine, started from the PySpark distribution's own
launcher: one master and N workers (``bin/spark-class org.apache.spark.deploy.master.Master``
and ``…worker.Worker spark://…``), on free ports, with their work, log and scratch folders in
one temporary folder, stopped (and the folder removed) however the block ends.

The pip distribution of PySpark has ``bin/spark-class`` and ``bin/spark-submit`` but no
``sbin/start-master.sh``; ``spark-class`` is what those scripts run. Used by
``tests/surfaces/spark/test_spark_cluster.py`` and ``bench/spark_cluster_bench.py``::

    with StandaloneCluster(workers=2, cores=1, memory="1g") as cluster:
        cluster.submit("job.py", "--rows", "20000")        # spark-submit --master spark://…
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

#: How long the master and the workers may take to come up (JVM start on a loaded 2-core box).
START_TIMEOUT = 120.0


def spark_home() -> Path:
    """The installed PySpark distribution (it carries ``bin/`` and ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    # Another process may take the port before the JVM binds it; the wait below then times out
    # with the daemon's log, which names the port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class ClusterError(RuntimeError):
    """A daemon did not start in time or died; the message carries the end of its log."""


class Daemon:
    """One master or worker JVM, in a process group of its own, logging into ``log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path, web_port: int) -> None:
        self.name = name
        self.log = log
        self.web_port = web_port
        with open(log, "wb") as out:
            # spark-class execs java: this pid is the JVM's (and its group's).
            self.process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def state(self) -> Any:
        """The daemon's web UI JSON (``/json/``)."""
        return get_json(f"{self.web_url}/json/")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise ClusterError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        if self.process.poll() is not None:
            return
        # SIGTERM first: the worker then kills its executors (their JVMs are its children).
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout)


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on 127.0.0.1."""

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = "256m",
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self._base_dir = base_dir
        self.dir = Path()
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []
        self.master_url = ""

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """The environment of the daemons and of ``spark-submit``."""
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.dir / "scratch"),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            # Executors run Python (if at all) on this interpreter, like the driver.
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "TZ": "UTC",
        }
        env.pop("SPARK_CONF_DIR", None)  # Spark's default log4j profile: the daemons log INFO to files
        return env

    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dbq-spark-cluster-", dir=self._base_dir))
        for sub in ("logs", "scratch", "work"):
            (self.dir / sub).mkdir()
        env = self.env()
        try:
            port, web = free_port(), free_port()
            self.master = Daemon(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(web),
                ],
                env,
                self.dir / "logs" / "master.log",
                web,
            )
            self.master_url = f"spark://127.0.0.1:{port}"
            self._wait("the master's web UI", lambda: self.master.state()["status"] == "ALIVE")  # type: ignore[union-attr]
            for n in range(self.worker_count):
                work = self.dir / "work" / f"worker{n}"
                work.mkdir()
                web = free_port()
                self.workers.append(
                    Daemon(
                        f"worker{n}",
                        [
                            "org.apache.spark.deploy.worker.Worker",
                            "--host",
                            "127.0.0.1",
                            "--port",
                            str(free_port()),
                            "--webui-port",
                            str(web),
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--work-dir",
                            str(work),
                            self.master_url,
                        ],
                        env,
                        self.dir / "logs" / f"worker{n}.log",
                        web,
                    )
                )
            self._wait(f"{self.worker_count} workers registered", self._all_registered)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for daemon in [*self.workers, *([self.master] if self.master else [])]:
            daemon.stop()
        self.workers, self.master = [], None
        if self.dir != Path() and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def _wait(self, what: str, ready: Any, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for daemon in [self.master, *self.workers]:
                if daemon is not None:
                    daemon.check_alive()
            try:
                if ready():
                    return
            except (OSError, ValueError, KeyError):
                pass  # the web UI is not up yet
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {d.name}\n{d.tail()}" for d in [self.master, *self.workers] if d)
                raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")
            time.sleep(0.5)

    def _all_registered(self) -> bool:
        alive = [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
        return len(alive) >= self.worker_count

    # -- what the cluster says ----------------------------------------------------------------

    def state(self) -> Any:
        """The master's JSON: ``workers``, ``activeapps``, ``completedapps``…"""
        assert self.master is not None, "the cluster is not running"
        return self.master.state()

    def executors_of(self, app_id: str) -> dict[str, list[Any]]:
        """Worker id -> the executors (running or finished) it ran for application ``app_id``."""
        found: dict[str, list[Any]] = {}
        for worker in self.workers:
            state = worker.state()
            found[state["id"]] = [
                e for e in state["executors"] + state["finishedexecutors"] if e.get("appid") == app_id
            ]
        return found

    # -- spark-submit -------------------------------------------------------------------------

    def submit(
        self,
        script: str | os.PathLike[str],
        *args: str,
        master: str | None = None,
        conf: dict[str, str] | None = None,
        jars: list[str] | None = None,
        py_files: list[str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 1800.0,
    ) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master <this cluster, or master>`` of a Python driver script (client
        mode), with the options of :func:`submit_command`; output captured as text."""
        command = submit_command(
            script, *args, master=master or self.master_url, conf=conf, jars=jars, py_files=py_files
        )
        return subprocess.run(
            command,
            env={**self.env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def submit_command(
    script: str | os.PathLike[str],
    *args: str,
    master: str,
    conf: dict[str, str] | None = None,
    jars: list[str] | None = None,
    py_files: list[str] | None = None,
) -> list[str]:
    """The ``spark-submit`` line the docs give: the JDBC jar with ``--jars``, UTC for the driver
    and the executors, ``--py-files`` for code the executors import."""
    utc = "-Duser.timezone=UTC"
    options = {
        "spark.driver.extraJavaOptions": utc,
        "spark.executor.extraJavaOptions": utc,
        "spark.sql.session.timeZone": "UTC",
        **(conf or {}),
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", master]
    if jars:
        command += ["--jars", ",".join(jars)]
    if py_files:
        command += ["--py-files", ",".join(py_files)]
    for key, value in options.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(script), *args]
