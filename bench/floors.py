# ruff: noqa: RUF001, RUF002 - the floors are typeset for BENCHMARKS.md (multiplication signs)
"""Issue #33's speed floors (and #20's claim-cost floor, which still stands), and the
arithmetic that turns a benchmark's results into them.

Every drain floor is a ratio taken WITHIN one round (both rates measured minutes apart on the
same machine), then the median over the rounds; a drain that failed its exactly-once check
counts as missing. The CPU floors are medians over the rounds of the worker command's CPU per
job (bench/costs.py). The enqueue floors are medians of paired ratios (bench/pairs.py,
bench/run.py), the claim-cost floor is the median of its rounds' ratios (benchctl claim-cost),
pickup latency and idle queries the medians over the rounds. Plain Python over the results'
JSON: unit-tested.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PEERS = ("djqueue", "tasksdb", "q2")
WORKERS = (1, 2, 4)
Runs = list[dict[str, Any]]


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def rate(run: dict[str, Any], system: str, variant: str, workers: int) -> float | None:
    """A drain's rate; None if it is missing or failed its exactly-once check."""
    for item in run["drain"]:
        if item["system"] == system and item["variant"] == variant and item["workers"] == workers:
            return item["rate"] if item["exactly_once"] == "ok" else None
    return None


def fastest_peer(run: dict[str, Any], workers: int) -> float | None:
    """The highest rate any peer reached in this run with ``workers`` workers."""
    rates = [rate(run, peer, "default", workers) for peer in PEERS]
    known = [r for r in rates if r]
    return max(known) if known else None


def drain_ratio(runs: Runs, top: tuple[str, str], bottom: tuple[str, str], workers: int) -> float | None:
    """Median over the runs of ``rate(top) / rate(bottom)`` within each run."""
    ratios = []
    for run in runs:
        a, b = rate(run, *top, workers), rate(run, *bottom, workers)
        if a and b:
            ratios.append(a / b)
    return median(ratios)


def peer_ratio(runs: Runs, top: tuple[str, str], workers: int) -> float | None:
    """Median over the runs of ``rate(top) / the fastest peer's rate`` within each run."""
    ratios = []
    for run in runs:
        a, b = rate(run, *top, workers), fastest_peer(run, workers)
        if a and b:
            ratios.append(a / b)
    return median(ratios)


def enqueue_ratio(runs: Runs, key: str) -> float | None:
    """The median over the runs of each run's ratio: the median of its paired measurements'
    ratios (django_dbqueue and raw SQL back to back), or for results written before the
    pairing, the ratio of the two medians."""
    ratios = []
    for run in runs:
        ours = next((e for e in run["enqueue"] if e["system"] == "dbqueue"), None)
        raw = next((e for e in run["enqueue"] if e["system"] == "raw"), None)
        if ours and ours.get(f"{key}_ratio"):
            ratios.append(ours[f"{key}_ratio"])
        elif ours and raw and ours[key] and raw[key]:
            ratios.append(ours[key] / raw[key])
    return median(ratios)


def save_ratio(runs: Runs, pair: str) -> float | None:
    """Median over the runs of a save() pair's time ratio (QueueMixin model / its twin)."""
    ratios = []
    for run in runs:
        ours = next((e for e in run["enqueue"] if e["system"] == "dbqueue"), None)
        ratios.append(((ours or {}).get("save") or {}).get(pair, {}).get("time_ratio"))
    return median(ratios)


def claim_cost_ratio(results: dict[str, Any]) -> float | None:
    """Claim time at the largest level of finished rows over the empty table's (the median
    of the rounds' ratios)."""
    levels = (results.get("claim_cost") or {}).get("levels") or []
    return levels[-1].get("ratio_to_first") if len(levels) > 1 else None


def drain_cost(runs: Runs, drained: tuple[str, str], workers: int, key: str) -> float | None:
    """Median over the runs of a drain's cost per job (``cpu_us_per_job`` or
    ``statements_per_job``); drains that failed exactly-once are left out."""
    values = []
    for run in runs:
        for item in run["drain"]:
            if (item["system"], item["variant"], item["workers"]) == (*drained, workers):
                values.append(item.get(key) if item["exactly_once"] == "ok" else None)
    return median(values)


def statement_kinds(runs: Runs, drained: tuple[str, str], workers: int) -> dict[str, float]:
    """Median over the runs of a drain's statements per job of each kind (a run without the
    kind counts 0 for it); drains that failed exactly-once are left out."""
    found = [
        item.get("statement_kinds_per_job") or {}
        for run in runs
        for item in run["drain"]
        if (item["system"], item["variant"], item["workers"]) == (*drained, workers)
        and item["exactly_once"] == "ok"
        and item.get("statements_per_job") is not None
    ]
    names = sorted({kind for kinds in found for kind in kinds})
    return {kind: statistics.median(kinds.get(kind, 0.0) for kinds in found) for kind in names}


def cpu_ms(runs: Runs, drained: tuple[str, str], workers: int = 1) -> float | None:
    """The worker command's CPU per job in milliseconds (median over the runs)."""
    us = drain_cost(runs, drained, workers, "cpu_us_per_job")
    return None if us is None else us / 1000


def cpu_ratio(runs: Runs, top: tuple[str, str], bottom: tuple[str, str], workers: int = 1) -> float | None:
    """``top``'s CPU per job over ``bottom``'s (each the median over the runs)."""
    a, b = (drain_cost(runs, drained, workers, "cpu_us_per_job") for drained in (top, bottom))
    return a / b if a and b else None


def park_wake(results: dict[str, Any], key: str) -> float | None:
    """Statements per row to park a workflow row (beyond an atomic job's run) or to wake it
    (``send_event()``, beyond the transaction around it): benchctl park-wake."""
    return (results.get("park_wake") or {}).get(key)


def pickup(runs: Runs, key: str) -> float | None:
    """Median over the runs of django_dbqueue's pickup figure ``key`` (``p50_ms``, ``p95_ms``,
    ``idle_queries_per_s``)."""
    return median([p[key] for run in runs for p in run.get("pickup", []) if p["system"] == "dbqueue"])


def pickup_p95(runs: Runs) -> float | None:
    return pickup(runs, "p95_ms")


def flow_ratio(results: dict[str, Any], server: str, mode: str) -> float | None:
    """A flow-control claim's rate over the plain claim's on ``server`` (bench/flow_claim.py's
    figures, if the run carries them under ``flow``)."""
    return ((results.get("flow") or {}).get(server) or {}).get(mode)


def fair_ratio(results: dict[str, Any], server: str, ready: int, mode: str) -> float | None:
    """A fair or aging claim's rate over the plain claim's on ``server`` over a backlog of
    ``ready`` due rows (bench/fair_claim.py's figures, if the run carries them under ``fair``)."""
    return (((results.get("fair") or {}).get(server) or {}).get(str(ready)) or {}).get(mode)


@dataclass(frozen=True)
class Floor:
    """One floor: ``figure(results)`` compared with ``bound`` (``at_least`` or at most).

    ``before`` and ``at_issue`` are the issue's own figures ("before the rebuild", "now" when
    it was filed); ``beside`` gives what the figure is compared with, where that helps (the raw
    loop's CPU beside ours)."""

    key: str
    label: str
    bound: float
    at_least: bool
    figure: Callable[[dict[str, Any]], float | None]
    unit: str = "×"
    before: str = "—"
    at_issue: str = "—"
    beside: Callable[[dict[str, Any]], str] | None = None
    by_run: bool = True  # a median over the rounds: each round's figure is shown too

    @property
    def target(self) -> str:
        unit = f" {self.unit}" if self.unit == "ms" else self.unit
        return f"{'≥' if self.at_least else '≤'} {self.bound:g}{unit}"

    def show(self, value: float | None) -> str:
        return "not measured" if value is None else show(value, self.unit)

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.bound if self.at_least else value <= self.bound

    def per_run(self, results: dict[str, Any]) -> list[float | None]:
        """The figure of each run alone (the floor's figure is their median, for run-based ones)."""
        if not self.by_run:
            return []
        return [self.figure({**results, "runs": [run]}) for run in results.get("runs", [])]

    def shortfall(self, value: float) -> float:
        """How far ``value`` is from the floor, as a fraction of the floor (0 when met): a rate
        ratio of 0.35 against 0.7 is 0.5 short; a time ratio of 1.38 against 1.15 is 0.2 over."""
        gap = (self.bound - value) if self.at_least else (value - self.bound)
        return max(gap / self.bound, 0.0)


def show(value: float, unit: str) -> str:
    """``value`` typeset in ``unit``: ratios with two decimals (one from 10×), milliseconds and
    rates with three significant digits."""
    if unit == "×":
        return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"
    text = f"{value:.3g}"
    return f"{text} ms" if unit == "ms" else f"{text}{unit}"


def verdict(floor: Floor, value: float | None) -> str:
    """``met``, ``MISSED by N%`` or ``not measured``."""
    met = floor.met(value)
    if met is None:
        return "not measured"
    return "met" if met else f"MISSED by {floor.shortfall(value or 0.0):.0%}"


def _drain(top: tuple[str, str], bottom: tuple[str, str], workers: int) -> Callable[[dict], float | None]:
    return lambda results: drain_ratio(results["runs"], top, bottom, workers)


def _peer(top: tuple[str, str], workers: int) -> Callable[[dict], float | None]:
    return lambda results: peer_ratio(results["runs"], top, workers)


def _cpu(drained: tuple[str, str]) -> Callable[[dict], float | None]:
    return lambda results: cpu_ms(results["runs"], drained)


def _cpu_beside(label: str, drained: tuple[str, str]) -> Callable[[dict], str]:
    def beside(results: dict[str, Any]) -> str:
        value = cpu_ms(results["runs"], drained)
        return f"{label} {show(value, 'ms') if value is not None else 'not measured'}"

    return beside


def _drain_beside(
    label: str, top: tuple[str, str], bottom: tuple[str, str], workers: int
) -> Callable[[dict], str]:
    def beside(results: dict[str, Any]) -> str:
        value = drain_ratio(results["runs"], top, bottom, workers)
        return f"{label} {show(value, '×') if value is not None else 'not measured'}"

    return beside


def _cpu_ratio_beside(top: tuple[str, str], bottom: tuple[str, str]) -> Callable[[dict], str]:
    def beside(results: dict[str, Any]) -> str:
        value = cpu_ratio(results["runs"], top, bottom)
        return f"CPU per job {show(value, '×') if value is not None else 'not measured'} the atomic job's"

    return beside


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count > 1 else ''}"


LEASE, ATOMIC, GROUPED = ("dbqueue", "lease"), ("dbqueue", "atomic"), ("dbqueue", "grouped")
OPTIMISTIC = ("dbqueue", "grouped-optimistic")
WORKFLOW = ("dbqueue", "workflow")
CLAIM100, BATCH, BATCH500 = ("raw", "claim100"), ("raw", "batch"), ("raw", "batch500")
FLOW_MODES = (("concurrency", "concurrency limit"), ("rate", "rate limit"), ("both", "both limits"))
FLOW_SERVERS = (("mysql", "MariaDB"), ("postgresql", "PostgreSQL"))
#: bench/fair_claim.py's modes (its own names), the floor lines' words, and issue #37's bounds.
FAIR_MODES = (
    ("fair share, 100 keys", "Fair claim, 100 keys", 0.7),
    ("fair share, 10,000 keys", "Fair claim, 10,000 keys", 0.7),
    ("aging alone (30 s)", "Aging claim (30 s bound)", 0.9),
)
FAIR_BACKLOGS = (10_000, 100_000)
#: Issue #33's table, line by line, in its order.
FLOORS: list[Floor] = [
    Floor(
        "atomic-raw-1",
        "Atomic mode, 1 worker / raw claim 100, ack each",
        0.45,
        True,
        _drain(ATOMIC, CLAIM100, 1),
        before="0.63×",
        at_issue="0.17×",
    ),
    *(
        Floor(
            f"atomic-peer-{w}",
            f"Atomic mode, {_workers(w)} / fastest peer",
            3,
            True,
            _peer(ATOMIC, w),
            before=was,
            at_issue=now,
        )
        for w, was, now in ((1, "4.2×", "1.03×"), (4, "4.9×", "0.83×"))
    ),
    Floor(
        "atomic-cpu",
        "Atomic mode, worker CPU per job (1 worker)",
        0.35,
        False,
        _cpu(ATOMIC),
        "ms",
        at_issue="2.36 ms (raw ack each 0.067 ms)",
        beside=_cpu_beside("raw claim 100, ack each", CLAIM100),
    ),
    Floor(
        "grouped-raw-1",
        "Grouped atomic mode (100 per transaction), 1 worker / raw claim 100, one ack per batch",
        0.5,
        True,
        _drain(GROUPED, BATCH, 1),
        at_issue="0.31×",
        # The optimistic group (queue_atomic_group_optimistic, opt-in) beside it, not in its
        # place: the same commits, but a failing handler runs its group again (the handlers
        # before it twice).
        beside=_drain_beside("optimistic groups (opt-in)", OPTIMISTIC, BATCH, 1),
    ),
    *(
        Floor(
            f"lease-raw-{w}",
            f"Lease mode, {_workers(w)} / raw claim 500, one ack per batch",
            0.6,
            True,
            _drain(LEASE, BATCH500, w),
            before=was,
            at_issue=now,
        )
        for w, was, now in ((1, "0.60×", "0.27×"), (4, "0.75×", "0.29×"))
    ),
    Floor(
        "lease-peer-4",
        "Lease mode, 4 workers / fastest peer",
        30,
        True,
        _peer(LEASE, 4),
        before="39×",
        at_issue="26×",
    ),
    Floor(
        "lease-cpu",
        "Lease mode, worker CPU per job (1 worker)",
        0.05,
        False,
        _cpu(LEASE),
        "ms",
        at_issue="0.123 ms (raw 0.006 ms)",
        beside=_cpu_beside("raw claim 500, one ack per batch", BATCH500),
    ),
    Floor(
        "save-raw",
        "One-by-one enqueue, `save()` / raw autocommit `INSERT`, rows per second",
        0.7,
        True,
        lambda results: enqueue_ratio(results["runs"], "one"),
        before="0.75×",
        at_issue="0.27×",
    ),
    *(
        Floor(
            f"save-{pair}",
            f"`save()` of a new row, time / the same model without QueueMixin ({what})",
            1.1,
            False,
            lambda results, pair=pair: save_ratio(results["runs"], pair),
        )
        for pair, what in (("bare", "no domain fields"), ("order", "an order: 9 domain fields"))
    ),
    Floor(
        "bulk",
        "`bulk_enqueue()` of 1,000-row batches with JSON payloads / raw multi-row `INSERT`, rows per second",
        0.7,
        True,
        lambda results: enqueue_ratio(results["runs"], "bulk"),
        before="0.78×",
        at_issue="0.14×",
    ),
    Floor(
        "pickup-p50",
        "Pickup latency p50 (one idle worker)",
        8,
        False,
        lambda r: pickup(r["runs"], "p50_ms"),
        "ms",
        before="8.6 ms",
        at_issue="11.4 ms",
    ),
    Floor(
        "pickup-p95",
        "Pickup latency p95 (one idle worker)",
        15,
        False,
        lambda r: pickup(r["runs"], "p95_ms"),
        "ms",
        before="14.2 ms",
        at_issue="24.1 ms",
    ),
    Floor(
        "idle-qps",
        "Idle worker, queries per second (no more than when the issue was filed)",
        65,
        False,
        lambda r: pickup(r["runs"], "idle_queries_per_s"),
        "/s",
        at_issue="65/s",
    ),
    *(
        Floor(
            f"flow-{mode}-{server}",
            f"Flow-control claim ({label}) / plain claim, {name}",
            0.5,
            True,
            lambda results, server=server, label=label: flow_ratio(results, server, label),
            at_issue={"concurrency": "0.26×", "rate": "0.54×", "both": "0.21×"}[mode]
            if server == "postgresql"
            else "—",
            by_run=False,
        )
        for server, name in FLOW_SERVERS
        for mode, label in FLOW_MODES
    ),
    # Issue #37: the fair and aging claims against the plain claim, over two backlogs.
    *(
        Floor(
            f"fair-{mode}-{server}-{ready}",
            f"{label} / plain claim, {name}, {ready:,} due rows (issue #37)",
            bound,
            True,
            lambda results, server=server, ready=ready, mode=mode: fair_ratio(results, server, ready, mode),
            by_run=False,
        )
        for server, name in FLOW_SERVERS
        for ready in FAIR_BACKLOGS
        for mode, label, bound in FAIR_MODES
    ),
    # Issue #36: a workflow step against an atomic job of the same handler body.
    Floor(
        "workflow-step",
        "A 1-step workflow in atomic mode, time per job / an atomic job of the same body (1 worker)",
        1.3,
        False,
        _drain(ATOMIC, WORKFLOW, 1),  # the atomic job's rate over the workflow's: a time ratio
        beside=_cpu_ratio_beside(WORKFLOW, ATOMIC),
    ),
    *(
        Floor(
            f"workflow-{key}",
            f"Statements to {key} a workflow row ({what})",
            2,
            False,
            lambda results, key=key: park_wake(results, key),
            " statements",
            by_run=False,
        )
        for key, what in (
            ("park", "a run that parks, beyond an atomic job's run"),
            ("wake", "`send_event()` that wakes it, beyond its transaction"),
        )
    ),
    Floor(
        "claim-cost",
        "Claim time at the largest level of finished rows / empty table (issue #20)",
        1.5,
        False,
        claim_cost_ratio,
        by_run=False,
    ),
]


def evaluate(results: dict[str, Any]) -> list[tuple[Floor, float | None, bool | None]]:
    """Every floor with its figure in ``results`` and whether it is met (None: not measured)."""
    out = []
    for floor in FLOORS:
        value = floor.figure(results)
        out.append((floor, value, floor.met(value)))
    return out
