"""Fixtures: a real second database connection, worker subprocesses, vendor helpers; and which
database pass runs which tests (``pytest_collection_modifyitems``, tests/README.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

# The Spark tests' session-wide SparkSession and history fixtures (started only when used).
from tests.spark_support import attempt_history, spark  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def vendor() -> str:
    return connection.vendor


# -- which database pass runs which tests ---------------------------------------------------
# `make test` runs the suite once per database (DATABASE_URL). A test runs in a pass when that
# database is among its folder's (the longest matching prefix below), unless the test or its module
# names its own with ``@pytest.mark.databases(*vendors, reason=...)``: a feature or a surface whose
# behaviour goes through a backend method that differs between databases. The rest is deselected,
# and the summary says how many and why. DBQUEUE_TESTS_EVERY_DATABASE=1 turns the rule off.
EVERY_DATABASE = ("mysql", "postgresql", "sqlite")
FOLDER_DATABASES: dict[str, tuple[tuple[str, ...], str]] = {
    "": (("sqlite",), "the repository's rules (layout, security scan) need one run"),
    "backends/": (EVERY_DATABASE, "the conformance suite of every backend"),
    "contract/": (EVERY_DATABASE, "the queue's promises, on every database"),
    "chaos/": (EVERY_DATABASE, "chaos tests pick their own server"),
    "soak/": (EVERY_DATABASE, "soak tests pick their own server"),
    "features/": (
        ("mysql", "sqlite"),
        "feature tests run on MariaDB and SQLite; on PostgreSQL only where a backend method differs",
    ),
    "surfaces/admin/": (("postgresql",), "the admin is a surface: one run, on PostgreSQL"),
    "surfaces/spark/": (("mysql",), "the Spark pipeline writes through MariaDB's JDBC driver"),
    "surfaces/commands/": (("sqlite",), "the commands are a surface: one run, on SQLite"),
    "surfaces/docs/": (("sqlite",), "the docs, the example and the benchmarks' scripts: one run, on SQLite"),
    "unit/": (("sqlite",), "no database: one run, in the SQLite pass"),
}
TESTS = Path(__file__).resolve().parent
_DESELECTED = pytest.StashKey[dict[str, int]]()


def every_database(reason: str) -> pytest.MarkDecorator:
    """Run this test (or module) in every database pass: its behaviour goes through a backend
    method or a database behaviour that differs between them (``reason`` says which)."""
    return pytest.mark.databases(*EVERY_DATABASE, reason=reason)


def running_vendor() -> str:
    """The database of this pass, from DATABASE_URL (before Django connects)."""
    url = os.environ.get("DATABASE_URL", "sqlite")
    return "sqlite" if url.startswith("sqlite") else "postgresql" if url.startswith("postgres") else "mysql"


def databases_of(item: pytest.Item) -> tuple[tuple[str, ...], str]:
    """The databases ``item`` runs on, and why."""
    mark = item.get_closest_marker("databases")
    if mark is not None:
        return tuple(mark.args), mark.kwargs["reason"]
    folder = item.path.resolve().parent
    if not folder.is_relative_to(TESTS):
        return EVERY_DATABASE, "outside tests/"
    where = folder.relative_to(TESTS).as_posix() + "/"
    prefix = max((p for p in FOLDER_DATABASES if where.startswith(p)), key=len)
    return FOLDER_DATABASES[prefix]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_DESELECTED] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DBQUEUE_TESTS_EVERY_DATABASE"):
        return
    running = running_vendor()
    kept, dropped = [], []
    why: dict[str, int] = config.stash[_DESELECTED]
    for item in items:
        vendors, reason = databases_of(item)
        if running in vendors:
            kept.append(item)
        else:
            dropped.append(item)
            why[reason] = why.get(reason, 0) + 1
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for reason, count in sorted(config.stash.get(_DESELECTED, {}).items()):
        terminalreporter.write_line(f"deselected on {running_vendor()}: {count} ({reason})")


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


def leases_run_out(model: Any) -> Callable[[], bool]:
    """A ``wait_until`` predicate: no RUNNING row of ``model`` holds a lease that the database's
    clock has not passed, so the next rescue returns every one of them (a fixed sleep of the
    lease's length raced the renewals a killed or frozen worker made just before it stopped)."""
    from django_dbqueue.backends import DbNow

    def run_out() -> bool:
        return not model.objects.filter(queue_state="running", queue_locked_until__gte=DbNow()).exists()

    return run_out


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


def run_on_terminal(command: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """Run ``command`` (from the repository's root) with a real pseudo-terminal as its
    stdin, stdout and stderr; return what it wrote there once it exited with 0."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, env=env, cwd=ROOT)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes when the command exits
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(timeout=timeout) == 0
    os.close(leader)
    return output.decode(errors="replace")
