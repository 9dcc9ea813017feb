"""Benchmark django_dbqueue against its peers and the raw-SQL limit; rewrite BENCHMARKS.md.

    python bench/run.py            # the full run (make bench)
    python bench/run.py --quick    # django_dbqueue's three modes against the raw-SQL loops only,
                                   # fewer enqueues, 3 interleaved rounds (make bench-quick); writes
                                   # bench/out/BENCHMARKS-quick.md
    python bench/run.py --quick --runs 1 --scale 0.2 --no-write   # checks the harness

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
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
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

UTC = timezone.utc  # datetime.UTC is Python 3.11+

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
        # django_dbqueue and the raw loop: rows with JSON payloads (issue #33's floor); the
        # peers' rows carry their task's arguments as JSON anyway.
        payload = ["--payload"] if system in ENQUEUE_PAIR else []
        bulk = ctl(system, "enqueue-bulk", "--n", str(n_bulk), *payload)
        out["bulk"], out["bulk_api"] = n_bulk / bulk["seconds"], bulk.get("api", "")
    if system == "dbqueue":
        reset_system(system)
        per_turn = str(max(n_one // SAVE_TURNS, 1))
        out["save_pairs"] = ctl(system, "save-pair", "--n", per_turn, "--turns", str(SAVE_TURNS))["pairs"]
    reset_system(system)
    return out


def enqueue(
    order: list[str], n_one: int, n_bulk: int, repeats: int = ENQUEUE_REPEATS
) -> list[dict[str, Any]]:
    """The enqueue figures of one run: every system ``repeats`` times, taking turns."""
    measured: dict[str, list[dict[str, Any]]] = {system: [] for system in order}
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for repeat in range(repeats):
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


#: The quick run (make bench-quick): django_dbqueue's three modes, a 1-step workflow (issue
#: #36's step cost) and the raw-SQL loops they are measured against (issue #33's floors), on
#: MariaDB, 1 and 4 workers.
QUICK_VARIANTS = {
    "dbqueue": ("lease", "atomic", "grouped", "grouped-optimistic", "workflow"),
    "raw": ("claim100", "batch", "batch500"),
}


@dataclass
class Plan:
    quick: bool
    runs: int
    systems: tuple[str, ...]
    workers: tuple[int, ...] = WORKER_COUNTS
    #: The variants drained per system (every variant of bench/common.py where not named).
    only: dict[str, tuple[str, ...]] = field(default_factory=dict)
    enqueue_repeats: int = ENQUEUE_REPEATS
    contention: bool = True  # the drain with concurrent enqueue and purge
    claim_cost: bool = True  # claims at 0 / 100k / 1M finished rows
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
    n_park: int = 500  # workflow rows parked and woken (benchctl park-wake)


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            quick=True,
            runs=args.runs or 3,
            systems=tuple(args.systems.split(",")) if args.systems else ("dbqueue", "raw"),
            workers=(1, 4),
            only=QUICK_VARIANTS,
            enqueue_repeats=3,
            contention=False,
            claim_cost=False,
            # The drains keep make bench's backlogs (20,000 / 3,000): at 8,000 / 800 a drain
            # lasted about a second on an idle machine, too short to compare with the raw loops.
            n_fast=20000,
            n_per_job=3000,
            n_claim1=500,
            n_peer=500,
            n_one=300,
            n_bulk=10000,
            trickle=15,
            idle_seconds=2.0,
            n_park=200,
        )
    else:
        systems = tuple(args.systems.split(",")) if args.systems else ("dbqueue", "raw", *PEERS)
        plan = Plan(quick=False, runs=args.runs or 3, systems=systems)
    return scaled(plan, args.scale)


def scaled(plan: Plan, scale: float) -> Plan:
    """``plan`` with every backlog and enqueue count times ``scale`` (a short check of the
    harness), at least 100 jobs each."""
    if scale == 1:
        return plan
    counts = ("n_fast", "n_per_job", "n_claim1", "n_peer", "n_one", "n_bulk", "n_park")
    return replace(plan, **{name: max(int(getattr(plan, name) * scale), 100) for name in counts})


@dataclass(frozen=True)
class Output:
    """Where a run writes: its results (JSON), its report and the report's chart."""

    results: Path
    report: Path
    chart: Path


def output(args: argparse.Namespace) -> Output:
    """BENCHMARKS.md for the full run; bench/out/ for the quick one (a quick run's figures are
    not the benchmark's, so it leaves BENCHMARKS.md and bench/benchmarks.png alone)."""
    if args.quick:
        report = Path(args.out) if args.out else LOG_DIR / "BENCHMARKS-quick.md"
        return Output(LOG_DIR / "results-quick.json", report, report.with_suffix(".png"))
    if args.out:  # a report elsewhere: its chart beside it, bench/benchmarks.png stays
        return Output(LOG_DIR / "results.json", Path(args.out), Path(args.out).with_suffix(".png"))
    return Output(LOG_DIR / "results.json", OUT_MD, OUT_PNG)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="django_dbqueue and the raw-SQL loops only, fewer enqueues, 3 rounds (make bench-quick)",
    )
    parser.add_argument("--runs", type=int, default=0, help="rounds, interleaved (default 3)")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every backlog and enqueue count (0.2: a check)"
    )
    parser.add_argument(
        "--out", default="", help="the report (BENCHMARKS.md; --quick: bench/out/BENCHMARKS-quick.md)"
    )
    parser.add_argument(
        "--systems", default="", help="comma-separated subset (dbqueue,raw,djqueue,tasksdb,q2)"
    )
    parser.add_argument("--no-write", action="store_true", help="print results, write no report")
    parser.add_argument("--skip", default="", help="comma-separated scenarios to skip")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from the run's results JSON"
    )
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the worker commands started so far.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    out = output(args)
    if args.report_only:
        # Not save(): that would stamp the run's end with the time of this rewrite.
        write_report(json.loads(out.results.read_text()), out)
        return
    plan = make_plan(args)
    skip = set(filter(None, args.skip.split(",")))
    log(f"benchmark ({'quick' if plan.quick else 'full'}, {plan.runs} round(s)); systems {plan.systems}")
    prepare_databases(plan.systems)
    results: dict[str, Any] = {
        "plan": plan.__dict__,
        "machine": machine_info(),
        "began": datetime.now(UTC).isoformat(timespec="seconds"),
        "load": {"began": load_average()},
        "runs": [],
        "errors": ERRORS,
    }
    write = not args.no_write
    if plan.contention and "contention" not in skip:
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

    if plan.claim_cost and "claim" not in skip and "dbqueue" in plan.systems:
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
    if "park" not in skip and "dbqueue" in plan.systems:
        results["park_wake"] = park_wake(plan)
    for run in range(plan.runs):
        log(f"round {run + 1}/{plan.runs}")
        results["runs"].append(one_run(plan, run, skip))
        save(results, out, write)  # after every round: an interrupted benchmark still leaves its results

    save(results, out, write, final=True)
    for line in floor_summary(results):
        log(line)


def park_wake(plan: Plan) -> dict[str, Any] | None:
    """Statements per row to park a workflow row and to wake it (benchctl park-wake)."""
    log("workflow rows: statements to park and to wake")
    found = attempt("park-wake", ctl, "dbqueue", "park-wake", "--n", str(plan.n_park))
    if found:
        for name in ("job", "park_sleep", "park_wait", "send", "after_sleep", "after_wait"):
            log(f"  {name}: {found[name]['per_row']:.2f} statements/row {found[name]['kinds']}")
        log(f"  park: {found['park']:.2f} statements beyond a job's run; wake: {found['wake']:.2f}")
    return found


def floor_summary(results: dict[str, Any]) -> list[str]:
    """One line per floor: met / missed and the figure (the end of the run's log)."""
    from bench import floors

    return [
        f"floor {floor.label}: {floors.verdict(floor, value)}"
        + (f" ({floor.show(value)}, target {floor.target})" if value is not None else "")
        for floor, value, _ in floors.evaluate(results)
    ]


def one_run(plan: Plan, run: int, skip: set[str]) -> dict[str, Any]:
    """One round: every system's enqueue, then every drain (each worker count in turn, the
    systems in a shuffled order), then pickup; so the rounds interleave the systems."""
    current: dict[str, Any] = {"enqueue": [], "drain": [], "pickup": [], "load": [load_average()]}
    order = list(plan.systems)
    random.Random(run).shuffle(order)
    if "enqueue" not in skip:
        current["enqueue"] = enqueue(order, plan.n_one, plan.n_bulk, plan.enqueue_repeats)
    if "drain" not in skip:
        for workers in plan.workers:
            for system in order:
                for variant in variants(system, plan.only):
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


def save(results: dict[str, Any], out: Output, write: bool, final: bool = False) -> None:
    results["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    results.setdefault("load", {})["ended"] = load_average()
    results["complete"] = final or results.get("complete", False)
    out.results.parent.mkdir(parents=True, exist_ok=True)
    out.results.write_text(json.dumps(results, indent=1, default=str))
    log(f"results in {out.results}")
    if write:
        write_report(results, out)


def write_report(results: dict[str, Any], out: Output) -> None:
    from bench import report

    report.write(with_flow(results, LOG_DIR), out.report, out.chart)
    log(f"wrote {out.report} and {out.chart}")


def with_flow(results: dict[str, Any], directory: Path) -> dict[str, Any]:
    """``results`` with the flow-control ratios of ``directory/flow-*.json`` (bench/flow_claim.py
    --json) and the fair claim's of ``directory/fair-*.json`` (bench/fair_claim.py --json),
    which `make bench` runs after this driver, then rewrites the report, that were written
    after the run began; older files are another run's."""
    began = datetime.fromisoformat(results["began"]).timestamp()
    flow: dict[str, Any] = {}
    fair: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("flow-*.json")):
        if path.stat().st_mtime >= began:
            found = json.loads(path.read_text())
            flow[found["server"]] = found["ratios"]
    for path in sorted(directory.glob("fair-*.json")):
        if path.stat().st_mtime >= began:
            found = json.loads(path.read_text())
            fair.setdefault(found["server"], {})[str(found["ready"])] = found["ratios"]
    return {**results, **({"flow": flow} if flow else {}), **({"fair": fair} if fair else {})}


def variants(system: str, only: dict[str, tuple[str, ...]] | None = None) -> tuple[str, ...]:
    if only and system in only:
        return tuple(only[system])
    if system == "dbqueue":
        return tuple(OURS_VARIANTS)
    if system == "raw":
        return tuple(RAW_VARIANTS)
    return ("default",)


def drain_n(plan: Plan, system: str, variant: str) -> int:
    if variant in ("lease", "lease-nohist", "grouped", "grouped-optimistic", "batch", "batch500"):
        return plan.n_fast
    if variant in ("atomic", "atomic-nohist", "workflow", "claim100"):
        return plan.n_per_job
    if variant == "claim1":
        return plan.n_claim1
    return plan.n_peer


if __name__ == "__main__":
    main()
