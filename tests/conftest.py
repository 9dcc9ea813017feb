"""Fixtures: a real second database connection, worker subprocesses, vendor helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection, connections

# The Spark tests' session-wide SparkSession and history fixtures (started only when used).
from tests.spark_support import attempt_history, spark  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def vendor() -> str:
    return connection.vendor


skip_on_sqlite = pytest.mark.skipif(
    "os.environ.get('DATABASE_URL', 'sqlite').startswith('sqlite')",
    reason="SQLite has no row locks / SKIP LOCKED; it serialises writers instead",
)


@pytest.fixture
def second_connection() -> Iterator:
    """A real, separate session to the test database (not a mock)."""
    other = connections.create_connection("default")
    other.ensure_connection()
    try:
        yield other
    finally:
        other.close()


class WorkerProcess:
    """A ``manage.py runqueue`` subprocess against the test database."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runqueue", "--settings", "tests.settings", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._output: str | None = None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def children(self) -> list[int]:
        """The pids of the worker processes the supervisor has started so far."""
        return _children(self.proc.pid)

    def kill_all(self) -> None:
        """SIGKILL the supervisor and every worker process it started (no clean-up runs)."""
        for pid in [*_children(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def worker_pids(self) -> list[int]:
        return _children(self.proc.pid)

    def wait(self, timeout: float = 120) -> int:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            out, _ = self.proc.communicate()
            raise AssertionError(
                f"runqueue {self.args} did not finish in {timeout}s:\n{out[-4000:]}"
            ) from None
        self._output = out
        return self.proc.returncode

    @property
    def output(self) -> str:
        assert self._output is not None, "wait() first"
        return self._output


def _children(pid: int) -> list[int]:
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [int(p) for p in out.split()]


@pytest.fixture
def start_worker() -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []
    env = dict(os.environ)
    env["DBQUEUE_TEST_DB_NAME"] = str(connection.settings_dict["NAME"])
    env.setdefault("DBQUEUE_LOG_LEVEL", "INFO")

    def start(*args: str, extra_env: dict[str, str] | None = None) -> WorkerProcess:
        # Committed data only is visible to another process: tests using this fixture
        # must be transactional (django_db(transaction=True)).
        connections.close_all()
        proc = WorkerProcess(list(args), {**env, **(extra_env or {})})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.kill_all()
            proc.proc.communicate()


def run_forked(target: Callable[..., None], args: list[tuple], timeout: float = 120) -> list:
    """Run ``target(*a, out)`` in one forked process per ``a`` in ``args``; return what each put
    on ``out`` (one item per process), after checking every process exited cleanly."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    connections.close_all()  # children must open their own sessions, not share ours
    procs = [context.Process(target=target, args=(*a, out)) for a in args]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=timeout) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return results


def wait_until(predicate: Callable[[], bool], timeout: float = 30, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def ledger_runs(model) -> dict[int, int]:
    """How many times each job of ``model`` wrote its Ledger row (committed), by job id."""
    from django.db.models import Count

    from tests.testapp.models import Ledger

    return dict(
        Ledger.objects.filter(kind=model.__name__)
        .values("job_id")
        .annotate(n=Count("id"))
        .values_list("job_id", "n")
    )
