"""Many hosts over a real network: the scenarios and their counters.

A private MariaDB runs in the database namespace, three ``runqueue`` hosts in theirs
(``network.py``), all talking TCP over the private /24; this process (the suite: rows in,
counters out) talks to the server over its unix socket, which no partition affects.

* **partition** (per mode): rows that take ``sleep`` s each; once host h1 holds RUNNING rows
  (in atomic mode: an open transaction with row locks on the server), its switch port is cut.
  It stays cut until every row h1 held was finished by h2/h3 (or ``hold_timeout`` passed:
  those rows are counted as stuck), then heals. h1 carries on where it was: its late outcomes
  must be rejected, and in atomic mode the handler's ledger row (its database effect) must
  exist once per row.
* **slow link**: h3's cable gets ``delay`` and ``loss`` (``wire.py``); rows of each mode are
  drained by all three hosts, once with the cable clean (baseline) and once impaired.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django_dbqueue.compat import UTC

from ..harness import ROOT, migrate_private_database, table_labels
from ..mariadb import WORKER_USER, PrivateMariaDB
from .network import Network

MODELS = {"lease": "testapp.ChaosLeaseJob", "atomic": "testapp.ChaosAtomicSingleJob"}


@dataclass
class Config:
    rows: int = 48  # per partition scenario
    sleep: float = 0.4  # each handler's time in the partition scenarios
    concurrency: int = 2
    batch_size: int = 4  # small claims in the partition scenarios: h1 holds a few rows at a time
    lease: float = 3.0
    hold_timeout: float = 20.0  # longest cut (s): rows of h1 still RUNNING then are "stuck"
    settle_timeout: float = 120.0
    #: The partition scenarios, in order: a mode, and the worker's DBQUEUE_ATOMIC_IDLE_TIMEOUT
    #: ("default": the setting left alone, 30 s at these leases; "0": the guard off; the quick
    #: run uses 6 s to stay under a minute).
    partitions: tuple[tuple[str, str], ...] = (("lease", "default"), ("atomic", "6"))
    slow_rows: int = 0  # per mode and pass of the slow-link scenario (0: no slow link)
    slow_sleep: float = 0.0
    slow_batch_size: int | None = None  # None: runqueue sizes its claims (DBQUEUE_BATCH_SECONDS)
    slow_delay_ms: float = 100.0
    slow_loss: float = 0.01
    workdir: str | None = None


class Host:
    """One ``runqueue`` on a host of the network."""

    def __init__(
        self, run: NetnsRun, host: str, model: str, tag: str, idle: str, batch_size: int | None
    ) -> None:
        self.host = host
        self.log_path = run.logdir / f"{tag}-{host}.log"
        self.log = open(self.log_path, "w")
        env = dict(run.worker_env)
        if idle != "default":
            env["CHAOS_ATOMIC_IDLE_TIMEOUT"] = idle
        cfg = run.config
        self.proc = subprocess.Popen(
            [
                *run.net.exec_prefix(host),
                *[sys.executable, "-m", "django", "runqueue", model, "--settings", "tests.chaos.settings"],
                *["--concurrency", str(cfg.concurrency)],
                *(["--batch-size", str(batch_size)] if batch_size else []),
                *["--lease", str(cfg.lease), "--poll-interval", "0.2", "--worker-id", host],
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")


class NetnsRun:
    def __init__(self, config: Config, net: Network, base: Path) -> None:
        self.config = config
        self.net = net
        self.base = base
        self.logdir = base / "logs"
        self.db = PrivateMariaDB(
            base / "mariadb", port=3306, bind_address=net.db_address, launcher=net.exec_prefix("db")
        )
        self.worker_env: dict[str, str] = {}

    # -- set-up ------------------------------------------------------------------------------

    def setup(self) -> None:
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.db.create()
        self.worker_env = migrate_private_database(self.db.admin_url(), self.db.url(WORKER_USER))

    def sql(self, statement: str, params: list[Any] | None = None) -> list[tuple]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(statement, params or [])
            return list(cursor.fetchall()) if cursor.description else []

    def model(self, mode: str) -> type:
        from django.apps import apps

        return apps.get_model(MODELS[mode])

    def insert(self, mode: str, count: int, sleep: float, batch: int) -> None:
        from tests.testapp.models import ChaosAtomicJob, ChaosLeaseJob

        concrete = ChaosLeaseJob if mode == "lease" else ChaosAtomicJob
        concrete.objects.bulk_create(concrete(batch=batch, sleep=sleep) for _ in range(count))

    def settle(self, mode: str, batch: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        model = self.model(mode)
        while time.monotonic() < deadline:
            if not model.objects.filter(batch=batch).exclude(queue_state="succeeded").exists():
                return True
            time.sleep(0.2)
        return False

    def round_trip_ms(self, host: str, count: int = 20) -> float:
        """Median time of ``SELECT 1`` from ``host`` to the database (ms)."""
        code = (
            "import MySQLdb, time, statistics, sys\n"
            f"c = MySQLdb.connect(host={self.net.db_address!r}, port=3306, user={WORKER_USER!r})\n"
            "cur = c.cursor(); times = []\n"
            f"for _ in range({count}):\n"
            "    t = time.perf_counter(); cur.execute('SELECT 1'); cur.fetchall()\n"
            "    times.append(time.perf_counter() - t)\n"
            "print(statistics.median(times) * 1000)\n"
        )
        done = subprocess.run(
            [*self.net.exec_prefix(host), sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return round(float(done.stdout.strip() or "nan"), 2)

    # -- partition ---------------------------------------------------------------------------

    def h1_sessions(self) -> set[int]:
        """The server's sessions of host h1 (its workers, keepers, supervisor)."""
        return {
            row[0]
            for row in self.sql(
                "SELECT id FROM information_schema.processlist WHERE host LIKE %s",
                [self.net.address("h1") + ":%"],
            )
        }

    def h1_transactions(self) -> int:
        """Transactions with row locks open on the server for sessions of host h1."""
        return self.sql(
            "SELECT COUNT(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p "
            "ON p.id = t.trx_mysql_thread_id WHERE p.host LIKE %s AND t.trx_rows_locked > 0",
            [self.net.address("h1") + ":%"],
        )[0][0]

    def locked_elsewhere(self, model: type, pks: list[int]) -> set[int]:
        """Rows of ``pks`` another session holds a lock on (SKIP LOCKED passes them by)."""
        from django.db import transaction

        with transaction.atomic():
            free = set(
                model.objects.filter(pk__in=pks)
                .select_for_update(skip_locked=True)
                .values_list("pk", flat=True)
            )
        return set(pks) - free

    def start_hosts(self, mode: str, tag: str, idle: str, batch_size: int | None) -> list[Host]:
        """Start a runqueue on every host; return once all their workers consume (a host
        behind a slow link takes longer to start: it must not miss the work for that)."""
        hosts = [Host(self, h, MODELS[mode], tag, idle, batch_size) for h in self.net.hosts]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all(h.text().count(" consuming ") >= self.config.concurrency for h in hosts):
                return hosts
            time.sleep(0.2)
        for h in hosts:
            h.stop()
        raise RuntimeError(f"the runqueues did not all start: see {self.logdir}")

    def partition(self, mode: str, idle: str, number: int) -> dict[str, Any]:
        from tests.testapp.models import ChaosLedger

        cfg, net = self.config, self.net
        model = self.model(mode)
        hosts = self.start_hosts(mode, f"partition-{mode}-{idle}", idle, cfg.batch_size)
        self.insert(mode, cfg.rows, cfg.sleep, number)
        result: dict[str, Any] = {"mode": mode, "atomic idle timeout": idle, "rows": cfg.rows}
        try:
            deadline = time.monotonic() + 60
            held: list[int] = []
            seen: Counter = Counter()
            while time.monotonic() < deadline:
                held = list(
                    model.objects.filter(
                        batch=number, queue_state="running", queue_locked_by__startswith="h1-"
                    ).values_list("pk", flat=True)
                )
                # Atomic mode: cut while a handler of h1 runs, i.e. holds its row's lock.
                locked = self.locked_elsewhere(model, held) if mode == "atomic" else set()
                seen[(bool(held), bool(locked))] += 1
                if held and (mode == "lease" or locked):
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"host h1 never held a row: nothing to cut off (polls: {seen})")
            net.partition("h1")
            cut = time.monotonic()
            cut_at = self.sql("SELECT UTC_TIMESTAMP(6)")[0][0].replace(tzinfo=UTC)
            result["rows h1 held when cut"] = len(held)
            result["rows h1 held locked (handler running) when cut"] = len(self.locked_elsewhere(model, held))
            # Slower than innodb_trx's cache: read again within 0.1 s, it is not refreshed.
            time.sleep(0.15)
            result["h1 transactions open when cut"] = self.h1_transactions()
            sessions = self.h1_sessions()
            rescued_at = finished_at = None
            while time.monotonic() - cut < cfg.hold_timeout:
                states = Counter(model.objects.filter(pk__in=held).values_list("queue_state", flat=True))
                if rescued_at is None and not states.get("running"):
                    rescued_at = time.monotonic() - cut
                if set(states) == {"succeeded"}:
                    finished_at = time.monotonic() - cut
                    break
                time.sleep(0.1)
            states = Counter(model.objects.filter(pk__in=held).values_list("queue_state", flat=True))
            result["h1 rows rescued by the others after (s)"] = (
                None if rescued_at is None else round(rescued_at, 1)
            )
            result["h1 rows finished by the others after (s)"] = (
                None if finished_at is None else round(finished_at, 1)
            )
            result["h1 rows stuck RUNNING until heal"] = states.get("running", 0)
            result["h1 transactions still open at heal"] = self.h1_transactions()
            # What the server did with the silent host's sessions while it was cut off.
            result["h1 sessions at cut / ended by the server before heal"] = (
                f"{len(sessions)} / {len(sessions - self.h1_sessions())}"
            )
            net.heal("h1")
            result["cut (s)"] = round(time.monotonic() - cut, 1)
            result["settled"] = self.settle(mode, number, cfg.settle_timeout)
            # h1 carries on: give it time to try its late outcomes (TCP retransmits back off).
            late_deadline = time.monotonic() + 60
            while time.monotonic() < late_deadline and not late_lines(hosts[0].text()):
                time.sleep(0.5)
            time.sleep(2)
        finally:
            codes = [h.stop() for h in hosts]
        result["runqueue exit codes"] = codes
        rows = list(model.objects.filter(batch=number).values_list("pk", "queue_state", "queue_attempts"))
        pks = [str(pk) for pk, *_ in rows]
        successes = Counter(
            attempts(model, pks).filter(outcome="succeeded").values_list("object_id", flat=True)
        )
        ledger = Counter(
            ChaosLedger.objects.filter(kind=model.chaos_kind, job_id__in=[pk for pk, *_ in rows]).values_list(
                "job_id", flat=True
            )
        )
        h1_log = hosts[0].text()
        result.update(
            {
                "rows succeeded": sum(1 for _, state, _ in rows if state == "succeeded"),
                "rows lost or unfinished": sum(1 for _, state, _ in rows if state != "succeeded"),
                "rows with more than one recorded success": sum(1 for n in successes.values() if n > 1),
                "rows whose handler effect committed more than once": sum(
                    1 for n in ledger.values() if n > 1
                ),
                "succeeded rows without their effect": sum(
                    1 for pk, s, _ in rows if s == "succeeded" and not ledger[pk]
                ),
                "handler runs (ledger rows)": sum(ledger.values()),
                "attempts recorded lost (rescued after an expired lease)": attempts(model, pks)
                .filter(outcome="lost")
                .count(),
                "h1 late outcomes rejected (log lines)": late_lines(h1_log),
                # Outcomes h1 wrote after the cut for rows it held then (its late outcomes
                # that got through). Atomic mode with the bound off: rows it still held.
                "h1 outcomes written after the cut for rows it held": attempts(
                    model, [str(pk) for pk in held]
                )
                .filter(worker_id__startswith="h1-", finished_at__gt=cut_at)
                .exclude(outcome="lost")
                .count(),
            }
        )
        return result

    # -- slow link ---------------------------------------------------------------------------

    def drain(self, mode: str, number: int, impaired: bool) -> dict[str, Any]:
        from tests.testapp.models import ChaosLedger

        cfg = self.config
        model = self.model(mode)
        if impaired:
            self.net.impair("h3", cfg.slow_delay_ms, cfg.slow_loss)
        tag = f"slow-{mode}-{'impaired' if impaired else 'clean'}"
        hosts = self.start_hosts(mode, tag, "default", cfg.slow_batch_size)
        before = self.net.wire_stats("h3")
        started = time.monotonic()
        try:
            self.insert(mode, cfg.slow_rows, cfg.slow_sleep, number)
            settled = self.settle(mode, number, cfg.settle_timeout)
            elapsed = time.monotonic() - started
        finally:
            after = self.net.wire_stats("h3")
            for h in hosts:
                h.stop()
            self.net.impair("h3", 0, 0)
        stats = {key: after[key] - before[key] for key in after}
        pks = [str(pk) for pk in model.objects.filter(batch=number).values_list("pk", flat=True)]
        done = attempts(model, pks).filter(outcome="succeeded")
        first, last = (
            attempts(model, pks).order_by(f).values_list("finished_at", flat=True)[0]
            for f in ("finished_at", "-finished_at")
        )
        span = max((last - first).total_seconds(), 1e-3)
        outcomes = list(done.values_list("worker_id", "claimed_at", "finished_at"))
        per_host: dict[str, list[tuple[Any, Any]]] = {h: [] for h in self.net.hosts}
        claims: Counter = Counter()
        for worker, claimed, finished in outcomes:
            per_host[worker.split("-")[0]].append((claimed or finished, finished))
            claims[worker, claimed] += 1  # one claim: a worker's rows with one claim time
        ledger = Counter(
            ChaosLedger.objects.filter(kind=model.chaos_kind, job_id__in=pks).values_list("job_id", flat=True)
        )

        def own_rate(rows: list[tuple[Any, Any]]) -> float:
            # From the host's first claim to its last outcome: its own pace, not the drain's.
            if not rows:
                return 0.0
            busy = (max(f for _, f in rows) - min(c for c, _ in rows)).total_seconds()
            return round(len(rows) / max(busy, 1e-3), 1)

        return {
            "mode": mode,
            "h3 link": f"delay {cfg.slow_delay_ms:g} ms, loss {cfg.slow_loss:.0%}" if impaired else "clean",
            "rows": len(pks),
            "settled": settled,
            "wall (s)": round(elapsed, 1),
            "drain, first to last outcome (s)": round(span, 1),
            "jobs/s overall (first to last outcome)": round(done.count() / span, 1),
            "rows per host": {h: len(rows) for h, rows in per_host.items()},
            "jobs/s per host (its first claim to its last outcome)": {
                h: own_rate(rows) for h, rows in per_host.items()
            },
            "last outcome per host, after the first outcome (s)": {
                h: round((max(f for _, f in rows) - first).total_seconds(), 1) if rows else None
                for h, rows in per_host.items()
            },
            "largest claim per host (rows)": {
                h: max((n for (w, _), n in claims.items() if w.split("-")[0] == h), default=0)
                for h in self.net.hosts
            },
            "rows lost or unfinished": model.objects.filter(batch=number)
            .exclude(queue_state="succeeded")
            .count(),
            "rows with more than one recorded success": sum(
                1 for n in Counter(done.values_list("object_id", flat=True)).values() if n > 1
            ),
            "rows whose handler effect committed more than once": sum(1 for n in ledger.values() if n > 1)
            if mode == "atomic"
            else None,
            "h3 cable frames while draining": stats,
        }

    # -- the whole run -----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg = self.config
        started = time.monotonic()
        self.setup()
        results: dict[str, Any] = {"setup (s)": round(time.monotonic() - started, 1)}
        results["SELECT 1 round trip, clean (ms)"] = {h: self.round_trip_ms(h) for h in self.net.hosts}
        results["partitions"] = [
            self.partition(mode, idle, number) for number, (mode, idle) in enumerate(cfg.partitions, 1)
        ]
        if cfg.slow_rows:
            self.net.impair("h3", cfg.slow_delay_ms, cfg.slow_loss)
            results["SELECT 1 round trip, h3 impaired (ms)"] = {
                h: self.round_trip_ms(h) for h in self.net.hosts
            }
            self.net.impair("h3", 0, 0)
            results["slow link"] = [
                self.drain(mode, 100 + 2 * i + impaired, impaired)
                for i, mode in enumerate(("lease", "atomic"))
                for impaired in (False, True)
            ]
        results["total (s)"] = round(time.monotonic() - started, 1)
        return results


def attempts(model: type, pks: list[str]) -> Any:
    """The attempt history of rows ``pks`` of ``model``'s table."""
    from django_dbqueue.models import QueueAttempt

    return QueueAttempt.objects.filter(model__in=table_labels(model._meta.concrete_model), object_id__in=pks)


def late_lines(log: str) -> int:
    return log.count("late outcome rejected") + len(re.findall(r"is no longer held by worker", log))
