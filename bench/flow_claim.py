"""What flow control costs a claim: the plain claim beside claims of models with limits.

    DATABASE_URL=mysql://root@127.0.0.1:3306/bench_flow python bench/flow_claim.py [--rows 20000]
    make bench-flow          (also run by make bench)

Issue #22 asks for the claim's cost with limits switched on, as a ratio to the plain claim.
Each mode drains ``--rows`` rows with ``claim(100)``; only the claims are timed (the batch's
success is then recorded, untimed, so RUNNING rows do not pile up). The limits are set high
enough not to hold anything back (1,000 keys, a batch spans about 100 of them): what is left is
the price of the gate itself (reading full keys, locking one slot row per key, recounting,
charging the rate windows). A last mode lets a limit bite (2 running per key, 50 keys, all
RUNNING rows kept) to show a claim skipping full keys. Runs use a throw-away test database
(``test_<name>`` of DATABASE_URL, MariaDB by default); prints a Markdown table of medians over
``--rounds`` rounds, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/bench_flow")
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from django_dbqueue.flow import limits, pauses  # noqa: E402
from django_dbqueue.queue.outcome import Outcome  # noqa: E402
from django_dbqueue.queue.record import record  # noqa: E402
from tests.testapp.models import LimitedJob  # noqa: E402

BATCH = 100
HIGH = 10**6


def declare(concurrency: int | None, rate: tuple[int, float] | None) -> None:
    """Set the limits of the one table every mode uses (so all share its history: on
    PostgreSQL the dead rows of earlier rounds slow every mode alike)."""
    LimitedJob.queue_limit_key = "customer" if concurrency or rate else None
    LimitedJob.queue_concurrency_limit = concurrency
    LimitedJob.queue_rate_limit = rate  # type: ignore[assignment]
    limits.limits_of.cache_clear()


MODES = {
    "plain claim (no limits)": (LimitedJob, None, None, 1000),
    "concurrency limit": (LimitedJob, HIGH, None, 1000),
    "rate limit": (LimitedJob, None, (HIGH, 1.0), 1000),
    "both limits": (LimitedJob, HIGH, (HIGH, 1.0), 1000),
}


def drain(name: str, rows: int) -> tuple[float, float]:
    """(claims per second, statements per claim) of draining ``rows`` rows."""
    model, concurrency, rate, keys = MODES[name]
    declare(concurrency, rate)
    model.objects.bulk_create([model(customer=f"c{i % keys}") for i in range(rows)], batch_size=5000)
    counted = [0]

    def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        counted[0] += 1
        return execute(sql, params, many, context)

    claims, spent = 0, 0.0
    while True:
        with connection.execute_wrapper(count):
            started = time.perf_counter()
            taken = model.objects.claim(BATCH)
            spent += time.perf_counter() - started
        if not taken:
            break
        claims += 1
        record(model, taken[0].queue_claim(), [Outcome.succeeded(row) for row in taken])
    model.objects.all().delete()
    return claims / spent, counted[0] / max(claims, 1)


def biting(rows: int = 2000) -> tuple[float, int]:
    """A limit that bites: claims per second while every key is full, and rows taken."""
    declare(2, None)
    LimitedJob.objects.bulk_create([LimitedJob(customer=f"k{i % 50}") for i in range(rows)])
    started, taken, claims = time.perf_counter(), 0, 0
    while claims < 50:
        taken += len(LimitedJob.objects.claim(BATCH))  # RUNNING rows are kept: keys fill up
        claims += 1
    rate = claims / (time.perf_counter() - started)
    LimitedJob.objects.all().delete()
    return rate, taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--json", default="", help="also write each mode's ratio to the plain claim here (the floors)"
    )
    args = parser.parse_args()
    creation = connection.creation
    creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    pauses.forget()
    try:
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in MODES}
        for _ in range(args.rounds):
            for name in MODES:
                results[name].append(drain(name, args.rows))
        bite_rate, bite_taken = biting()
    finally:
        creation.destroy_test_db(connection.settings_dict["NAME"], verbosity=0)
    plain = statistics.median(rate for rate, _ in results["plain claim (no limits)"])
    print(
        f"\nClaim cost with flow control ({connection.vendor}, {args.rows} rows per mode, claim({BATCH}), "
        f"median of {args.rounds} rounds)\n"
    )
    print("| mode | claims/s | rows/s | statements per claim | ratio to plain |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        statements = statistics.median(s for _, s in runs)
        print(f"| {name} | {rate:,.0f} | {rate * BATCH:,.0f} | {statements:.1f} | {rate / plain:.2f} |")
    print(
        f"\nA biting limit (2 running per key, 50 keys): {bite_rate:,.0f} claims/s, "
        f"{bite_taken} rows taken in 50 claims (at most 100)."
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"server": connection.vendor, "ratios": round_ratios(results)}))


def round_ratios(results: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Each mode's claim rate over the plain claim's: the median of the rounds' ratios (a mode
    and the plain claim of the same round ran minutes apart at most)."""
    plain = [rate for rate, _ in results["plain claim (no limits)"]]
    return {
        name: statistics.median(rate / base for (rate, _), base in zip(runs, plain, strict=True))
        for name, runs in results.items()
    }


if __name__ == "__main__":
    main()
