"""Benchmark django_dbqueue against its peers and the raw-SQL limit; rewrite BENCHMARKS.md.

    python bench/run.py            # the full run (make bench)
    python bench/run.py --quick    # small N, one run: checks the harness (make bench-quick)

Runs in the benchmark virtualenv (bench/.venv-peers: the peers, mysqlclient, matplotlib);
django_dbqueue runs in the project's .venv. Every system uses its own MariaDB database on
the same server, its public API and its own worker command. BENCHMARKS.md (bench/report.py)
states issue #20's floors, each a ratio within one run (medians over the runs), and says
whether this code meets them; see it for what each scenario does.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    ERRORS,
    LOG_DIR,
    OURS_VARIANTS,
    OUT_MD,
    OUT_PNG,
    PEERS,
    RAW_VARIANTS,
    ROOT,
    WORKER_COUNTS,
    attempt,
    ctl,
    load_average,
    log,
    machine_info,
    prepare_databases,
)
from bench.pairs import save_figures
from bench.scenarios import contention, drain, pickup, reset_system

# -- enqueue ---------------------------------------------------------------------------------

#: Measurements per enqueue figure of a run (their median is the figure). One takes well under
#: a second, so each system is measured this often, the systems taking turns, and a slow
#: minute of the shared machine falls on all of them rather than deciding one figure.
ENQUEUE_REPEATS = 5
#: The pair whose bulk ratio is a floor: measured back to back in every repeat (which goes
#: first alternates), so that each ratio compares the same moments of the shared machine.
ENQUEUE_PAIR = ("dbqueue", "raw")
#: Turns of each save() pair (a queue model and its twin without QueueMixin, alternating in one
#: process) per enqueue measurement of django_dbqueue; each turn saves n_one / SAVE_TURNS rows.
SAVE_TURNS = 10


def enqueue_once(system: str, n_one: int, n_bulk: int) -> dict[str, Any]:
    """One measurement of each enqueue kind of ``system``, each on an emptied table."""
    out: dict[str, Any] = {}
    reset_system(system)
    out["one"] = n_one / ctl(system, "enqueue-one", "--n", str(n_one))["seconds"]
    if system == "q2":
        out["bulk"], out["bulk_api"] = None, "none (no bulk enqueue API)"
    else:
        reset_system(system)
        bulk = ctl(system, "enqueue-bulk", "--n", str(n_bulk))
        out["bulk"], out["bulk_api"] = n_bulk / bulk["seconds"], bulk.get("api", "")
    if system == "dbqueue":
        reset_system(system)
        per_turn = str(max(n_one // SAVE_TURNS, 1))
        out["save_pairs"] = ctl(system, "save-pair", "--n", per_turn, "--turns", str(SAVE_TURNS))["pairs"]
    reset_system(system)
    return out


def enqueue(order: list[str], n_one: int, n_bulk: int) -> list[dict[str, Any]]:
    """The enqueue figures of one run: every system ENQUEUE_REPEATS times, taking turns."""
    measured: dict[str, list[dict[str, Any]]] = {system: [] for system in order}
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for repeat in range(ENQUEUE_REPEATS):
        this_repeat: dict[str, dict[str, Any]] = {}
        for system in paired_turns(order[repeat:] + order[:repeat], first=ENQUEUE_PAIR[repeat % 2]):
            item = attempt(f"enqueue {system}", enqueue_once, system, n_one, n_bulk)
            if item:
                measured[system].append(item)
                this_repeat[system] = item
        if all(system in this_repeat for system in ENQUEUE_PAIR):
            pairs.append((this_repeat[ENQUEUE_PAIR[0]], this_repeat[ENQUEUE_PAIR[1]]))
    figures = []
    for system, items in measured.items():
        if not items:
            continue
        out: dict[str, Any] = {"system": system, "bulk_api": items[0]["bulk_api"]}
        for kind in ("one", "bulk"):
            out[f"{kind}_each"] = [item[kind] for item in items]
            known = [rate for rate in out[f"{kind}_each"] if rate is not None]
            out[kind] = statistics.median(known) if known else None
        if system == ENQUEUE_PAIR[0] and pairs:
            for kind in ("one", "bulk"):
                ratios = [ours[kind] / raw[kind] for ours, raw in pairs if ours[kind] and raw[kind]]
                out[f"{kind}_ratio_each"] = ratios
                out[f"{kind}_ratio"] = statistics.median(ratios) if ratios else None
        log(f"  enqueue {system}: one-by-one {out['one']:,.0f}/s, bulk {out['bulk'] or 0:,.0f}/s")
        saves = save_figures(item.get("save_pairs") for item in items)
        if saves:
            out["save"] = saves
        for name, pair in saves.items():
            turns = len(pair["time_ratio_each"])
            log(
                f"  save() {name}: {pair['queue_us']:,.0f} µs with QueueMixin, {pair['plain_us']:,.0f} µs "
                f"without: {pair['time_ratio']:.2f}x the time (median of {turns} turns)"
            )
        figures.append(out)
    return figures


def paired_turns(turns: list[str], first: str) -> list[str]:
    """``turns`` with ENQUEUE_PAIR's two systems next to each other, ``first`` of them first,
    where the earlier of the two stood."""
    if not all(system in turns for system in ENQUEUE_PAIR):
        return turns
    second = next(system for system in ENQUEUE_PAIR if system != first)
    at = min(turns.index(system) for system in ENQUEUE_PAIR)
    rest = [system for system in turns if system not in ENQUEUE_PAIR]
    return [*rest[:at], first, second, *rest[at:]]


# -- the whole run ---------------------------------------------------------------------------


@dataclass
class Plan:
    quick: bool
    runs: int
    systems: tuple[str, ...]
    n_fast: int = 20000  # backlog of the batched drains (ours lease/grouped, raw batch ack)
    n_per_job: int = 3000  # one commit per job: ours atomic, raw claim 100 + ack each
    n_claim1: int = 2000  # raw claim 1 + ack each
    n_peer: int = 2000  # the peers (10-100x slower than the batched drains)
    n_one: int = 1000  # enqueued one by one
    n_bulk: int = 20000  # enqueued in bulk
    trickle: int = 30  # jobs of the pickup-latency trickle
    idle_seconds: float = 4.0  # window in which an idle worker's statements are counted
    levels: str = "0,100000,1000000"  # finished rows of the claim-cost scenario
    claims: int = 30  # rounds of the claim-cost scenario (a claim per level and system each)


def make_plan(args: argparse.Namespace) -> Plan:
    systems = tuple(args.systems.split(",")) if args.systems else ("dbqueue", "raw", *PEERS)
    if args.quick:
        return Plan(
            quick=True,
            runs=1,
            systems=systems,
            n_fast=3000,
            n_per_job=1000,
            n_claim1=500,
            n_peer=500,
            n_one=200,
            n_bulk=3000,
            trickle=10,
            idle_seconds=2.0,
            levels="0,10000,100000",
            claims=5,
        )
    return Plan(quick=False, runs=args.runs, systems=systems)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, one run (checks the harness)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--systems", default="", help="comma-separated subset (dbqueue,raw,djqueue,tasksdb,q2)"
    )
    parser.add_argument("--no-write", action="store_true", help="print results, leave BENCHMARKS.md alone")
    parser.add_argument("--skip", default="", help="comma-separated scenarios to skip")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite BENCHMARKS.md from bench/out/results.json"
    )
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the worker commands started so far.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.report_only:
        from bench import report

        # Not save(): that would stamp the run's end with the time of this rewrite.
        report.write(json.loads((LOG_DIR / "results.json").read_text()), OUT_MD, OUT_PNG)
        log(f"wrote {OUT_MD.name} and {OUT_PNG.relative_to(ROOT)}")
        return
    plan = make_plan(args)
    skip = set(filter(None, args.skip.split(",")))
    log(f"benchmark ({'quick' if plan.quick else 'full'}, {plan.runs} run(s)); systems {plan.systems}")
    prepare_databases()
    results: dict[str, Any] = {
        "plan": plan.__dict__,
        "machine": machine_info(),
        "began": datetime.now(UTC).isoformat(timespec="seconds"),
        "load": {"began": load_average()},
        "runs": [],
        "errors": ERRORS,
    }
    write = not args.no_write
    if "contention" not in skip:
        log("contention: drain with concurrent enqueue and purge")
        found = [
            attempt(
                f"contention {system}/{variant}",
                contention,
                system,
                variant,
                drain_n(plan, system, variant),
                drain_n(plan, system, variant) // 4,
                timeout=600,
            )
            for system, variant in (("dbqueue", "lease"), ("dbqueue", "atomic"), ("raw", "batch"))
            if system in plan.systems
        ]
        results["contention"] = [item for item in found if item]

    if "claim" not in skip and "dbqueue" in plan.systems:
        log("claim cost on a wide domain table")
        results["claim_cost"] = attempt(
            "claim cost", ctl, "dbqueue", "claim-cost", "--levels", plan.levels, "--claims", str(plan.claims)
        )
        for level in (results["claim_cost"] or {}).get("levels", []):
            log(
                f"  {level['finished']:>9,} finished rows: {level['ms_per_claim']:.2f} ms/claim, "
                f"{level['reads_per_claim']} handler reads (raw SQL: {level['raw_ms_per_claim']:.2f} ms, "
                f"{level['raw_reads_per_claim']})"
            )
    for run in range(plan.runs):
        log(f"run {run + 1}/{plan.runs}")
        results["runs"].append(one_run(plan, run, skip))
        save(results, write)  # after every run: an interrupted benchmark still leaves its results

    save(results, write, final=True)


def one_run(plan: Plan, run: int, skip: set[str]) -> dict[str, Any]:
    current: dict[str, Any] = {"enqueue": [], "drain": [], "pickup": [], "load": [load_average()]}
    order = list(plan.systems)
    random.Random(run).shuffle(order)
    if "enqueue" not in skip:
        current["enqueue"] = enqueue(order, plan.n_one, plan.n_bulk)
    if "drain" not in skip:
        for workers in WORKER_COUNTS:
            for system in order:
                for variant in variants(system):
                    n = drain_n(plan, system, variant)
                    item = attempt(
                        f"drain {system}/{variant} x{workers}", drain, system, variant, workers, n, 600
                    )
                    if item:
                        current["drain"].append(item)
    if "pickup" not in skip:
        for system in order:
            if system != "raw":
                item = attempt(f"pickup {system}", pickup, system, plan.trickle, plan.idle_seconds)
                if item:
                    current["pickup"].append(item)
    current["load"].append(load_average())
    return current


def save(results: dict[str, Any], write: bool, final: bool = False) -> None:
    results["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    results.setdefault("load", {})["ended"] = load_average()
    results["complete"] = final or results.get("complete", False)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "results.json").write_text(json.dumps(results, indent=1, default=str))
    log(f"results in {(LOG_DIR / 'results.json').relative_to(ROOT)}")
    if write:
        from bench import report

        report.write(results, OUT_MD, OUT_PNG)
        log(f"wrote {OUT_MD.name} and {OUT_PNG.relative_to(ROOT)}")


def variants(system: str) -> tuple[str, ...]:
    if system == "dbqueue":
        return tuple(OURS_VARIANTS)
    if system == "raw":
        return tuple(RAW_VARIANTS)
    return ("default",)


def drain_n(plan: Plan, system: str, variant: str) -> int:
    if variant in ("lease", "lease-nohist", "grouped", "batch", "batch500"):
        return plan.n_fast
    if variant in ("atomic", "atomic-nohist", "claim100"):
        return plan.n_per_job
    if variant == "claim1":
        return plan.n_claim1
    return plan.n_peer


if __name__ == "__main__":
    main()
