"""One scenario, inside Django (``DATABASE_URL`` names its fresh database): migrate, insert the
rows, start ``manage.py runqueue``, inject the fault, wait until every row is finished (or the
time is up), stop the workers, count. Prints the result as JSON on its last line.

``python -m tests.chaos.faults.child '<scenario json>' WORKDIR`` (the parent does this)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
#: Each good row's handler sleeps this long, so faults land while the queue is busy.
SLEEP = 0.02
#: Deeper than Python's json decoder goes (tests/contract/test_hostile_payloads.py).
DEEP = "[" * 12_000 + "]" * 12_000
READ_ONLY_FOR = 4.0


def db_now(connection: Any) -> Any:
    from django_dbqueue.backends import aware

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()" if connection.vendor == "postgresql" else "SELECT UTC_TIMESTAMP(6)")
        return aware(cursor.fetchone()[0])


def seed(scenario: Any, rows: int) -> tuple[dict[str, set[int]], dict[str, set[int]], str | None]:
    """Insert the poison row (first in claim order) and the good rows of each model."""
    from django.db import connection

    from tests.testapp.models import HostileAtomicJob, HostileJob

    good: dict[str, set[int]] = {}
    poison: dict[str, set[int]] = {}
    for model in (HostileJob, HostileAtomicJob):
        kind = model.__name__
        if scenario.poison:
            row = model.objects.create(action=scenario.poison, data={"n": 1})
            poison[kind] = {row.pk}
            if scenario.deep_json:
                table = connection.ops.quote_name(model._meta.db_table)
                cast = "::jsonb" if connection.vendor == "postgresql" else ""
                try:
                    with connection.cursor() as cursor:
                        cursor.execute(f"UPDATE {table} SET data = %s{cast} WHERE id = %s", [DEEP, row.pk])
                except Exception as exc:  # noqa: BLE001 - the server refusing it is the answer
                    return good, poison, f"{connection.vendor} refuses to store it: {exc}"
        model.objects.bulk_create([model(action="slow", data={"sleep": SLEEP}) for _ in range(rows)])
        good[kind] = set(model.objects.values_list("pk", flat=True)) - poison.get(kind, set())
    return good, poison, None


def unfinished(models: list[Any]) -> int:
    return sum(m.objects.filter(queue_state__in=["ready", "running"]).count() for m in models)


def good_done(models: list[Any], good: dict[str, set[int]]) -> int:
    return sum(
        m.objects.filter(pk__in=good[m.__name__], queue_state__in=["succeeded", "failed"]).count()
        for m in models
    )


def sessions(connection: Any) -> int:
    """The sessions open on this scenario's database (the workers' and this process's)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        else:
            cursor.execute("SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE()")
        return int(cursor.fetchone()[0])


def run(scenario: Any, rows: int, lease: float, timeout: float, workdir: Path) -> dict[str, Any]:
    import django
    from django.core.management import call_command

    django.setup()
    from django.db import connection, connections

    from django_dbqueue.models import QueueAttempt
    from tests.chaos.faults import measure, servers
    from tests.testapp.models import HostileAtomicJob, HostileJob, Ledger

    models = [HostileJob, HostileAtomicJob]
    call_command("migrate", verbosity=0)
    good, poison, not_applicable = seed(scenario, rows)
    result: dict[str, Any] = {"scenario": asdict(scenario), "rows": rows}
    if not_applicable:
        return {**result, "not_applicable": not_applicable}
    log = workdir / f"{scenario.label}.log"
    command = [sys.executable, "-m", "django", "runqueue", "--settings", "tests.settings"]
    command += [m._meta.label for m in models]
    command += ["--concurrency", str(scenario.concurrency), "--lease", str(lease)]
    command += ["--batch-size", "20", "--poll-interval", "0.1"]
    env = {**os.environ, "DBQUEUE_TEST_RESCUE_INTERVAL": "0.5", "DBQUEUE_LOG_LEVEL": "INFO"}
    started = db_now(connection)
    connections.close_all()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    fault_at = started
    deadline = time.monotonic() + timeout
    try:
        if scenario.read_only:
            total = sum(len(pks) for pks in good.values())
            while good_done(models, good) < total // 10 and time.monotonic() < deadline:
                time.sleep(0.1)
            fault_at = db_now(connection)
            connections.close_all()  # PostgreSQL: the fault ends every session of the database
            with servers.read_only(scenario.server, connection.settings_dict["NAME"]):
                time.sleep(READ_ONLY_FOR)
            result["read_only_for"] = READ_ONLY_FOR
        peak = 0
        while unfinished(models) and time.monotonic() < deadline:
            peak = max(peak, sessions(connection))
            time.sleep(0.2)
        result["peak_sessions"] = peak
    finally:
        connections.close_all()
        proc.send_signal(signal.SIGTERM)
        try:
            result["exit_code"] = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            result["exit_code"] = f"killed after SIGTERM + 60 s: {proc.wait()}"
    if scenario.poison:
        first_claim = (
            QueueAttempt.objects.filter(
                model__in=[m._meta.label for m in models],
                object_id__in=[str(pk) for pks in poison.values() for pk in pks],
            )
            .order_by("claimed_at")
            .values_list("claimed_at", flat=True)[:1]
        )
        fault_at = next(iter(first_claim), None) or fault_at
    table: list[measure.Row] = []
    for model in models:
        for pk, state, attempts, error, finished in model.objects.values_list(
            "pk", "queue_state", "queue_attempts", "queue_last_error", "queue_finished_at"
        ):
            table.append(measure.Row(model.__name__, pk, state, attempts, error or "", finished))
    runs = Counter((kind, job) for kind, job in Ledger.objects.values_list("kind", "job_id") if kind in good)
    counts = measure.count(table, good, poison, runs, {"HostileAtomicJob"}, fault_at)
    result.update(counts.as_dict())
    finishes = [r.finished_at for r in table if r.finished_at]
    result["drain"] = round((max(finishes) - started).total_seconds(), 2) if finishes else None
    text = log.read_text(errors="replace")
    result["log"] = {
        "lines": text.count("\n"),
        "tracebacks": text.count("Traceback"),
        "replaced": text.count("replacing it"),
        "workers_started": text.count(" consuming "),
        "read_only_lines": text.count("read-only"),
        "too_many_connections": text.count("Too many connections"),
        "warning": next((line for line in text.splitlines() if line.startswith("Warning:")), ""),
        "summary": next((line for line in text.splitlines() if line.startswith("runqueue:")), ""),
    }
    result["log_file"] = str(log)
    return result


if __name__ == "__main__":
    from tests.chaos.faults.scenarios import Scenario

    spec = json.loads(sys.argv[1])
    outcome = run(
        Scenario(**spec["scenario"]), spec["rows"], spec["lease"], spec["timeout"], Path(sys.argv[2])
    )
    print(json.dumps(outcome, default=str))
