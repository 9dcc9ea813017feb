# ruff: noqa: RUF001 - the floors are typeset for BENCHMARKS.md (multiplication signs)
"""Issue #20's speed floors, and the arithmetic that turns a benchmark's results into them.

Every drain floor is a ratio taken WITHIN one run (both rates measured minutes apart on the same
machine), then the median over the runs; a drain that failed its exactly-once check counts as
missing. The enqueue floors are medians of paired ratios (bench/pairs.py, bench/run.py), the
claim-cost floor is the median of its rounds' ratios (benchctl claim-cost), pickup p95 the
median over the runs. Plain Python over the results' JSON: unit-tested.
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


def pickup_p95(runs: Runs) -> float | None:
    return median([p["p95_ms"] for run in runs for p in run.get("pickup", []) if p["system"] == "dbqueue"])


@dataclass(frozen=True)
class Floor:
    """One floor: ``figure(results)`` compared with ``bound`` (``at_least`` or at most)."""

    key: str
    label: str
    bound: float
    at_least: bool
    figure: Callable[[dict[str, Any]], float | None]
    unit: str = "×"

    @property
    def target(self) -> str:
        return f"{'≥' if self.at_least else '≤'} {self.bound:g}{' ' if self.unit == 'ms' else ''}{self.unit}"

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.bound if self.at_least else value <= self.bound

    def per_run(self, results: dict[str, Any]) -> list[float | None]:
        """The figure of each run alone (the floor's figure is their median, for run-based ones)."""
        return [self.figure({**results, "runs": [run]}) for run in results.get("runs", [])]

    def shortfall(self, value: float) -> float:
        """How far ``value`` is from the floor, as a fraction of the floor (0 when met): a rate
        ratio of 0.35 against 0.7 is 0.5 short; a time ratio of 1.38 against 1.15 is 0.2 over."""
        gap = (self.bound - value) if self.at_least else (value - self.bound)
        return max(gap / self.bound, 0.0)


def _drain(top: tuple[str, str], bottom: tuple[str, str], workers: int) -> Callable[[dict], float | None]:
    return lambda results: drain_ratio(results["runs"], top, bottom, workers)


def _peer(top: tuple[str, str], workers: int) -> Callable[[dict], float | None]:
    return lambda results: peer_ratio(results["runs"], top, workers)


LEASE, ATOMIC, GROUPED = ("dbqueue", "lease"), ("dbqueue", "atomic"), ("dbqueue", "grouped")
FLOORS: list[Floor] = [
    Floor(
        "lease-raw-4",
        "Lease mode, 4 workers / raw claim 500, one ack per batch",
        0.7,
        True,
        _drain(LEASE, ("raw", "batch500"), 4),
    ),
    Floor("lease-peer-4", "Lease mode, 4 workers / fastest peer", 20, True, _peer(LEASE, 4)),
]
for _w in WORKERS:
    FLOORS.append(
        Floor(
            f"atomic-raw-{_w}",
            f"Atomic mode (1 job per transaction), {_w} worker{'s' if _w > 1 else ''} "
            "/ raw claim 100, ack each",
            0.35,
            True,
            _drain(ATOMIC, ("raw", "claim100"), _w),
        )
    )
for _w in WORKERS:
    FLOORS.append(
        Floor(
            f"atomic-peer-{_w}",
            f"Atomic mode, {_w} worker{'s' if _w > 1 else ''} / fastest peer",
            3,
            True,
            _peer(ATOMIC, _w),
        )
    )
for _w in WORKERS:
    FLOORS.append(
        Floor(
            f"grouped-raw-{_w}",
            f"Grouped atomic mode (100 per transaction), {_w} worker{'s' if _w > 1 else ''} "
            "/ raw claim 100, one ack per batch",
            0.7,
            True,
            _drain(GROUPED, ("raw", "batch"), _w),
        )
    )
FLOORS += [
    Floor(
        "save-order",
        "`save()` of a new row, time / the same model without QueueMixin (an order: 9 domain fields)",
        1.15,
        False,
        lambda results: save_ratio(results["runs"], "order"),
    ),
    Floor(
        "save-bare",
        "`save()` of a new row, time / the same model without QueueMixin (no domain fields)",
        1.15,
        False,
        lambda results: save_ratio(results["runs"], "bare"),
    ),
    Floor(
        "bulk",
        "`bulk_enqueue()` / raw executemany, rows per second",
        0.6,
        True,
        lambda results: enqueue_ratio(results["runs"], "bulk"),
    ),
    Floor(
        "claim-cost",
        "Claim time at the largest level of finished rows / empty table",
        1.5,
        False,
        claim_cost_ratio,
    ),
    Floor(
        "pickup-p95", "Pickup latency p95 (one idle worker)", 50, False, lambda r: pickup_p95(r["runs"]), "ms"
    ),
]


def evaluate(results: dict[str, Any]) -> list[tuple[Floor, float | None, bool | None]]:
    """Every floor with its figure in ``results`` and whether it is met (None: not measured)."""
    out = []
    for floor in FLOORS:
        value = floor.figure(results)
        out.append((floor, value, floor.met(value)))
    return out
