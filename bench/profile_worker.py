"""Profile one django_dbqueue worker draining no-op jobs in-process (pyinstrument).

    .venv/bin/python bench/profile_worker.py --model dbqapp.NoopJob --n 20000

Uses its own databases (bench_profile, bench_profile_ledger). Prints jobs/s without and with
the profiler, SQL statements per job (by kind), and the
pyinstrument call tree. Needs ``pip install pyinstrument`` in the project's .venv.
``BENCH_DBQ_HISTORY=0`` turns the attempt history off, as the benchmark's "history off" rows.

``--drains K`` only drains, K times without a profiler, and prints the medians of the rate and
of this process's CPU per job: the measure to compare two trees of the library by (run each
tree's copy of this file in turn, a few rounds, on a quiet machine).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("BENCH_SYSTEM", "dbqueue")
# Its own databases: never the tables or the ledger of a benchmark that may be running.
os.environ.setdefault("BENCH_DB_NAME", "bench_profile")
os.environ.setdefault("BENCH_LEDGER_DB", "bench_profile_ledger")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django

django.setup()

from django.apps import apps  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from django_dbqueue.worker import Worker  # noqa: E402


def fill(model, n: int) -> None:
    from django_dbqueue.models import WorkflowEvent, WorkflowProgress, WorkflowStep

    with connection.cursor() as cursor:
        # The workflow tables too (dbqapp.WorkflowJob): TRUNCATE starts the pks again at 1,
        # and a new row must not replay an old row's checkpoints.
        for table in (model, WorkflowStep, WorkflowEvent, WorkflowProgress):
            cursor.execute(f"TRUNCATE TABLE {table._meta.db_table}")
    with transaction.atomic():
        model.objects.bulk_create([model() for _ in range(n)], batch_size=1000)


def timed_drain(model, batch: int) -> tuple[float, float]:
    """One drain: jobs per second, and this process's CPU seconds per job."""
    start, cpu = time.perf_counter(), time.process_time()
    stats = Worker(models=[model], batch_size=batch, burst=True, handle_signals=False).run()
    assert stats.succeeded > 0, stats
    wall = time.perf_counter() - start
    return stats.succeeded / wall, (time.process_time() - cpu) / stats.succeeded


def drain(model, batch: int) -> float:
    rate, cpu_per_job = timed_drain(model, batch)
    print(f"  ({cpu_per_job * 1e6:.0f} us CPU per job in this process)")
    return rate


def drains(model, args: argparse.Namespace) -> None:
    """``--drains K``: K drains of ``--n`` rows, each on a fresh fill; the medians."""
    rates, cpus = [], []
    for _ in range(args.drains):
        fill(model, args.n)
        rate, cpu_per_job = timed_drain(model, args.batch)
        rates.append(rate)
        cpus.append(cpu_per_job)
    print(
        f"{args.model}: {statistics.median(rates):,.0f} jobs/s, {statistics.median(cpus) * 1e6:.1f} us CPU "
        f"per job in this process (medians of {args.drains} drains of {args.n:,})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="dbqapp.NoopJob")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument(
        "--batch", type=int, default=None, help="rows per claim (default: the library's sizing, as runqueue)"
    )
    parser.add_argument(
        "--cprofile", action="store_true", help="also cProfile a drain: the worker thread's CPU by function"
    )
    parser.add_argument(
        "--drains", type=int, default=0, help="only drain, this many times, and print the medians"
    )
    args = parser.parse_args()
    model = apps.get_model(args.model)
    from django.core.management import call_command

    from bench import ledger

    ledger.reset()
    server = ledger.connect(None)
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {os.environ['BENCH_DB_NAME']}")
    server.close()
    call_command("migrate", verbosity=0)

    if args.drains:
        drains(model, args)
        return
    fill(model, args.n)
    print(f"{args.model}: {drain(model, args.batch):,.0f} jobs/s without profiler")

    fill(model, args.n)
    kinds: collections.Counter[str] = collections.Counter()

    def count(execute, sql, params, many, context):
        kinds[" ".join(sql.split()[:1]).upper() + (" FOR UPDATE" if "FOR UPDATE" in sql else "")] += 1
        return execute(sql, params, many, context)

    from django.db.backends.signals import connection_created

    def wrap(sender, connection, **kwargs):
        if count not in connection.execute_wrappers:
            connection.execute_wrappers.append(count)

    connection_created.connect(wrap)
    connection.close()
    rate = drain(model, args.batch)
    connection_created.disconnect(wrap)
    total = sum(kinds.values())
    by_kind = ", ".join(f"{k}: {v}" for k, v in kinds.most_common())
    print(f"statements per job: {total / args.n:.3f}  ({by_kind})")
    print(f"(with statement counting: {rate:,.0f} jobs/s)")

    from pyinstrument import Profiler

    fill(model, args.n)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    rate = drain(model, args.batch)
    profiler.stop()
    print(f"with pyinstrument: {rate:,.0f} jobs/s")
    print(profiler.output_text(unicode=False, color=False, show_all=False))
    if args.cprofile:
        cprofile_drain(model, args)


def cprofile_drain(model, args: argparse.Namespace) -> None:
    """One more drain under cProfile (the worker's own thread): the top functions by their own
    time, and django_dbqueue's by cumulative time, per job."""
    import cProfile
    import pstats

    fill(model, args.n)
    profile = cProfile.Profile()
    profile.enable()
    rate = drain(model, args.batch)
    profile.disable()
    stats = pstats.Stats(profile)
    print(f"with cProfile: {rate:,.0f} jobs/s; {stats.total_tt * 1e6 / args.n:.0f} µs profiled per job")
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats("django_dbqueue", 25)


if __name__ == "__main__":
    main()
