"""Profile enqueueing in-process (pyinstrument): ``save()`` of new rows of a queue model and of
its twin without QueueMixin (the benchmark's save() pairs), and ``bulk_enqueue()``.

    .venv/bin/python bench/profile_enqueue.py --pair order --n 3000 --bulk 20000

Uses its own database (bench_profile). Prints each side's time per save (alternating turns, as
the benchmark) and the pyinstrument call tree of each. Needs ``pip install pyinstrument``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("BENCH_SYSTEM", "dbqueue")
os.environ.setdefault("BENCH_DB_NAME", "bench_profile")
os.environ.setdefault("BENCH_LEDGER_DB", "bench_profile_ledger")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench import ledger  # noqa: E402
from bench.dbqapp.management.commands.benchctl import ORDER_VALUES  # noqa: E402
from bench.dbqapp.models import SAVE_PAIRS  # noqa: E402
from bench.pairs import turn_order  # noqa: E402


def saves(model, values: dict, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        model(**values).save()
    return time.perf_counter() - start


def cprofile_saves(model, values: dict, n: int) -> None:
    """cProfile ``n`` saves: the total, the driver's round trips and Django's SQL compilation."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    saves(model, values, n)
    profile.disable()
    stats = pstats.Stats(profile)
    query = sum(
        s[3] for f, s in stats.stats.items() if f[2] == "<function Connection.query>" or "query" == f[2]
    )
    compile_ = sum(
        s[3] for f, s in stats.stats.items() if f[0].endswith("sql/compiler.py") and f[2] == "as_sql"
    )
    print(
        f"--- cProfile, {n:,} saves of {model._meta.label}: {stats.total_tt * 1e6 / n:.0f} µs per save, "
        f"round trip (Connection.query) {query / stats.total_tt:.0%}, SQL compilation (as_sql) "
        f"{compile_ * 1e6 / n:.0f} µs per save ---"
    )
    stats.sort_stats("tottime").print_stats(8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pair", default="order", choices=sorted(SAVE_PAIRS))
    parser.add_argument("--n", type=int, default=3000, help="saves of each model")
    parser.add_argument("--bulk", type=int, default=20000, help="rows of bulk_enqueue()")
    parser.add_argument("--cprofile", action="store_true", help="also cProfile each side's saves")
    args = parser.parse_args()
    ledger.reset()
    server = ledger.connect(None)
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {os.environ['BENCH_DB_NAME']}")
    server.close()
    call_command("migrate", verbosity=0)
    queue_model, plain_model = SAVE_PAIRS[args.pair]
    values = ORDER_VALUES if args.pair == "order" else {}
    models = {"queue": queue_model, "plain": plain_model}
    connection.ensure_connection()
    times: dict[str, list[float]] = {"queue": [], "plain": []}
    turns = 10
    for turn in range(turns):
        for side in turn_order(turn, "queue", "plain"):
            times[side].append(saves(models[side], values, args.n // turns) * 1e6 / (args.n // turns))
    ratios = [q / p for q, p in zip(times["queue"], times["plain"], strict=True)]
    print(
        f"{args.pair}: {statistics.median(times['queue']):.0f} µs per save with QueueMixin, "
        f"{statistics.median(times['plain']):.0f} µs without; time ratio {statistics.median(ratios):.2f} "
        f"(median of {turns} turns)"
    )
    from pyinstrument import Profiler

    for model in models.values():
        profiler = Profiler(interval=0.0002)
        profiler.start()
        saves(model, values, args.n)
        profiler.stop()
        print(f"--- save() of {model._meta.label} ---")
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    profiler = Profiler(interval=0.0005)
    profiler.start()
    start = time.perf_counter()
    queue_model.objects.bulk_enqueue([{} for _ in range(args.bulk)], batch_size=1000)
    seconds = time.perf_counter() - start
    profiler.stop()
    if args.cprofile:
        for model in models.values():
            cprofile_saves(model, values, args.n)
    label = queue_model._meta.label
    print(f"--- bulk_enqueue() of {args.bulk:,} {label} rows: {args.bulk / seconds:,.0f}/s ---")
    print(profiler.output_text(unicode=False, color=False, show_all=False))


if __name__ == "__main__":
    main()
