"""What fair share and aging cost a claim, and the issue's full-size fairness run (issue #37).

    DATABASE_URL=mysql://root@127.0.0.1:3306/bench_fair python bench/fair_claim.py [--ready 100000]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_fair python bench/fair_claim.py --processes
    make bench-fairness      (both servers, both parts)

Part 1, the claim's cost: with a standing backlog of ``--ready`` due rows (what the ranking of
every due row reads, and what the bounded read of fairness/bounded.py must not depend on),
``--claims`` claims of 100 rows each are timed (their success recorded, untimed, so the
backlog stays). Modes: fair share over 100 and over 10,000 keys; aging alone, one after the
other in each of ``--rounds`` rounds, each against the plain claim on its own fill, the two
claiming in turn. Each fill (after a TRUNCATE) is followed by VACUUM ANALYZE / ANALYZE TABLE
and, on MariaDB, a wait for InnoDB's purge. Prints a Markdown table of medians over the
rounds, each mode's rate against the plain claim's taken within each round, then their
median (``--json PATH`` writes
those ratios for ``make bench``'s floor lines), and the EXPLAIN of the ranking of every due row
at that backlog (what SQLite, and aging with a fair key, still run).

Part 2 (``--processes``), the issue's proof at full size: one tenant with 100,000 rows and 20
tenants with 10 rows each, 4 ``runqueue`` workers (``--batch-size 4``): the claim (of 4 x 2)
after which every quiet tenant had its first row claimed, and each tenant's share of claims
while it had work. Part 3 (``--aging 30``): the issue's aging proof, the histogram of 100
priority-0 rows' waits under a saturating stream of priority-10 rows. ``--claimers N
[--batch B]``: N claimer processes at once, claims per second of the plain claim and of fair
share over 100 keys (fair claims of a model take turns on the round robin's lock). Runs use a
throw-away test database (``test_<name>`` of DATABASE_URL).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/bench_fair")
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import django  # noqa: E402

django.setup()

from django.core.management.color import no_style  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from django_dbqueue.conf import settings  # noqa: E402
from django_dbqueue.fairness import options  # noqa: E402
from django_dbqueue.fairness.ranking import fair_ranking  # noqa: E402
from django_dbqueue.queue.outcome import Outcome  # noqa: E402
from django_dbqueue.queue.record import record  # noqa: E402
from django_dbqueue.states import QueueState  # noqa: E402
from tests.testapp.models import AgedJob, FairJob  # noqa: E402

BATCH = 100


def declare(model: type, key: str | None, aging: float | None) -> None:
    model.queue_fair_key = key
    model.queue_fair_weights = None
    model.queue_aging = aging
    options.fair_share_of.cache_clear()
    options.fair_share_of(model)  # read here, not inside the timed claim


def fill(model: type, ready: int, keys: int) -> None:
    """``ready`` due rows over ``keys`` keys, in a table emptied by TRUNCATE: a DELETE of the
    last mode's 100,000 rows left InnoDB's purge (or PostgreSQL's dead tuples) working in the
    background through the next mode's timed claims, which moved one round's ratios of every
    mode by up to 0.3 together (a round of 0.70 between rounds of 1.07 and 0.89)."""
    with connection.cursor() as cursor:
        for statement in connection.ops.sql_flush(no_style(), [model._meta.db_table]):
            cursor.execute(statement)
    model.objects.bulk_create([model(customer=f"c{i % keys}") for i in range(ready)], batch_size=5000)
    settle(model)


def settle(model: type) -> None:
    """The table as a standing backlog finds it: the statistics taken (autovacuum, InnoDB's
    persistent statistics) and the undo of earlier work purged, so no mode's plan or timing
    hangs on when the server last got round to that. On MariaDB, setting
    ``innodb_max_purge_lag_wait`` to 0 waits until the purge has caught up (MySQL has no such
    variable: there the purge is left to itself)."""
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"VACUUM ANALYZE {table}")
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")
            cursor.fetchall()
            if connection.mysql_is_mariadb:
                cursor.execute("SET GLOBAL innodb_max_purge_lag_wait = 0")


PLAIN = "plain claim"
#: Each mode is timed against the plain claim on the same table and fill (``model``,
#: ``keys`` distinct keys), claim by claim in turn: ``(model, key, aging, keys)``.
MODES = {
    "fair share, 100 keys": (FairJob, "customer", None, 100),
    "fair share, 10,000 keys": (FairJob, "customer", None, 10_000),
    "aging alone (30 s)": (AgedJob, None, 30.0, 100),
}
#: Per claim: milliseconds (wall), milliseconds of this process's CPU, statements.
Timing = tuple[float, float, float]


def timed(name: str, ready: int, claims: int) -> dict[str, Timing]:
    """Per claim of 100 rows over a standing backlog of ``ready`` rows, for mode ``name`` and
    for the plain claim on the same fill: milliseconds (wall), milliseconds of this
    process's CPU, and statements (``BEGIN`` and ``COMMIT`` included, counted over 5 claims
    each before, untimed: the count does not move with the machine's load).

    The two modes claim in turn, one claim each (which one goes first alternating), from
    the same backlog: the machine's load, the server's background work (purge, checkpoints)
    and the table's state move both alike. Timed a mode at a time, a minute apart, one
    round's ratios moved by up to 0.3 together."""
    model, key, aging, keys = MODES[name]
    fill(model, ready + 2 * (claims + 5) * BATCH, keys)
    declared = {PLAIN: (None, None), name: (key, aging)}
    statements = dict.fromkeys(declared, 0)
    for _ in range(5):  # counted first, so the timed claims find the backlog of before
        for mode, (fair_key, bound) in declared.items():
            declare(model, fair_key, bound)
            with CaptureQueriesContext(connection) as captured:
                taken = model.objects.claim(BATCH)
            statements[mode] += len(captured.captured_queries)
            record(model, taken[0].queue_claim(), [Outcome.succeeded(row) for row in taken])
    spent: dict[str, list[float]] = {mode: [] for mode in declared}
    cpu: dict[str, list[float]] = {mode: [] for mode in declared}
    for number in range(claims):
        order = list(declared.items())
        for mode, (fair_key, bound) in order if number % 2 else order[::-1]:
            declare(model, fair_key, bound)
            started, started_cpu = time.perf_counter(), time.process_time()
            _claim_and_record(model, spent[mode], cpu[mode], started, started_cpu)
    median = statistics.median
    return {
        mode: (median(spent[mode]) * 1000, median(cpu[mode]) * 1000, statements[mode] / 5)
        for mode in declared
    }


def _claim_and_record(
    model: Any,
    spent: list[float] | None = None,
    cpu: list[float] | None = None,
    started: float = 0.0,
    started_cpu: float = 0.0,
) -> None:
    """One ``claim(100)`` (its time appended to ``spent`` and ``cpu`` when given, from
    ``started``), then its rows' success recorded, untimed: the backlog stays as it was."""
    taken = model.objects.claim(BATCH)
    if spent is not None and cpu is not None:
        spent.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    record(model, taken[0].queue_claim(), [Outcome.succeeded(row) for row in taken])


def explain(ready: int) -> str:
    declare(FairJob, "customer", None)
    fill(FairJob, ready, 10_000)
    fair = options.fair_share_of(FairJob)
    assert fair is not None
    ranking = fair_ranking(FairJob.objects.all(), fair).values_list("pk")[: 4 * BATCH]
    sql, params = ranking.query.sql_with_params()
    # QuerySet.explain() misplaces EXPLAIN inside the QUALIFY-like wrapper on MariaDB.
    analyze = "EXPLAIN ANALYZE " if connection.vendor == "postgresql" else "ANALYZE "
    if connection.vendor == "mysql" and not connection.mysql_is_mariadb:
        analyze = "EXPLAIN ANALYZE "
    with connection.cursor() as cursor:
        cursor.execute(analyze + sql, params)
        return "\n".join(" | ".join(str(v) for v in row) for row in cursor.fetchall())


def processes(busy: int = 100_000, workers: int = 4, batch: int = 4) -> None:
    declare(FairJob, "customer", None)
    FairJob.objects.all().delete()
    FairJob.objects.bulk_create([FairJob(customer="busy") for _ in range(busy)], batch_size=5000)
    FairJob.objects.bulk_create([FairJob(customer=f"quiet{n:02}") for n in range(20) for _ in range(10)])
    env = {**os.environ, "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"])}
    command = [sys.executable, "-m", "django", "runqueue", "testapp.FairJob", "--settings", "tests.settings"]
    connections.close_all()
    started = [
        subprocess.Popen([*command, "--concurrency", "1", "--batch-size", str(batch)], cwd=ROOT, env=env)
        for _ in range(workers)
    ]
    quiet = FairJob.objects.exclude(customer="busy")
    try:
        while quiet.exclude(queue_state=QueueState.SUCCEEDED).exists():
            time.sleep(0.2)  # a poll of the run's progress
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait()
    stamps = FairJob.objects.exclude(queue_last_attempt_at=None).values_list(
        "queue_last_attempt_at", "customer"
    )
    claims = sorted({at for at, _ in stamps})
    first = {}
    for at, customer in stamps:
        if customer != "busy":
            first[customer] = min(at, first.get(customer, at))
    last_quiet_claim = claims.index(max(first.values())) + 1
    share = Counter(customer == "busy" for at, customer in stamps if at <= max(first.values()))
    print(
        f"\nFull-size fairness ({connection.vendor}): {busy:,} busy rows, 20 x 10 quiet, {workers} workers, "
        f"batch {batch}: every quiet tenant's first row was claimed by claim {last_quiet_claim} "
        f"(two cycles: {2 * workers}); rows claimed until then: busy {share[True]}, quiet {share[False]}."
    )


def aging_run(bound: float, workers: int = 2, low: int = 100, spread: float = 0.0) -> None:
    """The issue's aging proof: a stream of priority-10 rows arriving faster than ``workers``
    take them (0.01 s each), ``low`` priority-0 rows, a ``bound`` s aging bound; prints the
    histogram of the priority-0 rows' waits (claim time less due time, database clock).

    ``spread`` 0: the priority-0 rows are all due at once, so they age in the same instant and
    the workers take them a batch at a time (the bound holds per row plus the batches of the
    rows aged with it); ``spread`` S: they arrive one by one over S seconds inside the stream,
    each aging alone (the bound as one row sees it)."""
    declare(AgedJob, None, bound)
    AgedJob.objects.all().delete()
    if not spread:
        AgedJob.objects.bulk_create([AgedJob(customer="low", queue_priority=0) for _ in range(low)])
    env = {
        **os.environ,
        "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "BENCH_AGING": str(bound),
    }
    command = [sys.executable, "-m", "django", "runqueue", "testapp.AgedJob", "--settings", "tests.settings"]
    connections.close_all()
    started = [
        subprocess.Popen([*command, "--concurrency", "1", "--batch-size", "4"], cwd=ROOT, env=env)
        for _ in range(workers)
    ]
    waiting = AgedJob.objects.filter(customer="low").exclude(queue_state=QueueState.SUCCEEDED)
    began, sent = time.monotonic(), 0 if spread else low
    try:
        while sent < low or waiting.exists():
            stream = [AgedJob(customer="high", queue_priority=10, sleep=0.01) for _ in range(10 * workers)]
            due = min(low, int((time.monotonic() - began) / spread * low) + 1) if spread else sent
            stream += [AgedJob(customer="low", queue_priority=0) for _ in range(due - sent)]
            sent = due
            AgedJob.objects.bulk_create(stream)
            time.sleep(0.05)  # the stream's pace
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait()
    rows = AgedJob.objects.filter(customer="low").values_list("queue_run_at", "queue_last_attempt_at")
    waits = sorted((claimed - due).total_seconds() for due, claimed in rows)
    backlog = AgedJob.objects.filter(customer="high", queue_state=QueueState.READY).count()
    poll = float(settings.POLL_INTERVAL)
    late = sum(w > bound + poll for w in waits)
    arrival = f"arriving over {spread:g} s" if spread else "due at once"
    print(
        f"\nAging ({connection.vendor}): {low} priority-0 rows {arrival}, bound {bound:g} s, "
        f"{workers} workers, "
        f"priority-10 rows still waiting at the end: {backlog}; waits p50 {waits[len(waits) // 2]:.3f} s, "
        f"p95 {waits[int(len(waits) * 0.95)]:.3f} s, longest {waits[-1]:.3f} s; over bound + one poll "
        f"interval ({bound + poll:g} s): {late}\n"
    )
    step = max(bound / 10, 0.5)
    buckets = Counter(int(w // step) for w in waits)
    for bucket in range(max(buckets) + 1):
        print(
            f"{bucket * step:6.1f}-{(bucket + 1) * step:6.1f} s | {'#' * buckets[bucket]} {buckets[bucket]}"
        )


def _claiming(mode: str, batch: int, seconds: float, out: Any) -> None:
    """One claimer process of :func:`concurrent`: claim, record, again, for ``seconds``."""
    model, key, aging, _ = MODES[mode]
    declare(model, key, aging)
    connections.close_all()  # a forked child opens its own session
    claims = rows = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        taken = model.objects.claim(batch)
        if taken:
            record(model, taken[0].queue_claim(), [Outcome.succeeded(row) for row in taken])
            claims, rows = claims + 1, rows + len(taken)
    out.put((claims, rows))


def concurrent(claimers: int, batch: int, seconds: float = 8.0, ready: int = 40_000) -> None:
    """``claimers`` processes claiming ``batch`` rows at a time for ``seconds`` (each claim's
    success recorded), the plain claim and fair share over 100 keys, twice each: claims per
    second of them all. Fair claims of one model take turns on the round robin's turn (its
    lock), plain claims pass each other by with SKIP LOCKED."""
    context = multiprocessing.get_context("fork")
    for mode in ("plain claim", "fair share, 100 keys") * 2:
        model, key, aging, keys = MODES[mode]
        declare(model, key, aging)
        fill(model, ready, keys)
        connections.close_all()
        out = context.Queue()
        args = (mode, batch, seconds, out)
        started = [context.Process(target=_claiming, args=args) for _ in range(claimers)]
        for proc in started:
            proc.start()
        counts = [out.get() for _ in started]
        for proc in started:
            proc.join()
        claims, rows = (sum(count[i] for count in counts) / seconds for i in (0, 1))
        print(
            f"{mode} ({connection.vendor}): {claimers} claimers, claim({batch}): "
            f"{claims:.0f} claims/s, {rows:.0f} rows/s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", action="store_true", help="the full-size run with 4 workers")
    parser.add_argument("--aging", type=float, help="the aging run with this bound (the issue's: 30)")
    parser.add_argument(
        "--claimers", type=int, help="this many concurrent claimer processes (claims per second)"
    )
    parser.add_argument("--batch", type=int, default=4, help="rows per claim with --claimers")
    parser.add_argument(
        "--aging-spread", type=float, default=0.0, help="priority-0 rows arrive over so many s"
    )
    parser.add_argument(
        "--json", default="", help="also write each mode's ratio to the plain claim here (the floors)"
    )
    args = parser.parse_args()
    creation = connection.creation
    creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        if args.processes:
            processes()
            return
        if args.aging:
            aging_run(args.aging, spread=args.aging_spread)
            return
        if args.claimers:
            concurrent(args.claimers, args.batch)
            return
        results: dict[str, list[dict[str, Timing]]] = {name: [] for name in MODES}
        for _ in range(args.rounds):
            for name in MODES:
                results[name].append(timed(name, args.ready, args.claims))
        plan = explain(args.ready)
    finally:
        connections.close_all()
        creation.destroy_test_db(connection.settings_dict["NAME"], verbosity=0)
    ratios = round_ratios(results)
    print(
        f"\nClaim cost, fair share and aging ({connection.vendor}, {args.ready:,} due rows, claim({BATCH}), "
        f"{args.claims} claims of each mode and of the plain claim on its table, in turn, in each of "
        f"{args.rounds} rounds)\n"
    )
    print(
        "| mode | ms per claim (plain's) | rate / plain's (each round) | CPU ms per claim (plain's) "
        "| statements per claim (plain's) |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, runs in results.items():
        figures = [
            f"{statistics.median(run[name][column] for run in runs):.1f} "
            f"({statistics.median(run[PLAIN][column] for run in runs):.1f})"
            for column in range(3)
        ]
        each = " / ".join(f"{r:.2f}" for r in ratios[name][1])
        print(f"| {name} | {figures[0]} | {ratios[name][0]:.2f} ({each}) | {figures[1]} | {figures[2]} |")
    if args.json:
        found = {name: ratio for name, (ratio, _) in ratios.items()}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"server": connection.vendor, "ready": args.ready, "ratios": found})
        )
    print(f"\nEXPLAIN of the fair ranking at {args.ready:,} due rows, 10,000 keys:\n\n{plan}")


Ratios = dict[str, tuple[float, list[float]]]


def round_ratios(results: dict[str, list[dict[str, Timing]]]) -> Ratios:
    """Each mode's claim rate over the plain claim's timed in turn with it: the median of the
    rounds' ratios, and each round's."""
    out = {}
    for name, runs in results.items():
        each = [run[PLAIN][0] / run[name][0] for run in runs]
        out[name] = (statistics.median(each), each)
    return out


if __name__ == "__main__":
    main()
