# ruff: noqa: RUF001, RUF003 - BENCHMARKS.md is typeset (en dashes, multiplication signs)
"""The benchmark's floor arithmetic (bench/floors.py), the save() pairs (bench/pairs.py, bench/run.py),
the "before" figures read from an old BENCHMARKS.md (bench/before.py) and the floors table of the
report. Measurements are made up here: what is tested is the arithmetic, not a speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import before, floors, pairs, report, run


def drain(system: str, variant: str, workers: int, rate: float, ok: bool = True) -> dict[str, Any]:
    return {
        "system": system,
        "variant": variant,
        "workers": workers,
        "rate": rate,
        "exactly_once": "ok" if ok else "FAILED: 1 duplicate runs",
        "rss": {"max_process_mb": 40.0, "total_mb": 40.0 * workers},
        "cpu_us_per_job": 30.0,
    }


def a_run(
    lease4: float, batch500_4: float, peers4: tuple[float, float, float], **extra: Any
) -> dict[str, Any]:
    drains = [
        drain("dbqueue", "lease", 4, lease4),
        drain("raw", "batch500", 4, batch500_4),
        *(drain(peer, "default", 4, r) for peer, r in zip(floors.PEERS, peers4, strict=True)),
    ]
    return {"drain": drains + extra.pop("drains", []), "enqueue": [], "pickup": [], **extra}


def test_turn_order_alternates_who_goes_first():
    assert [pairs.turn_order(t, "queue", "plain") for t in range(3)] == [
        ("queue", "plain"),
        ("plain", "queue"),
        ("queue", "plain"),
    ]


def test_save_figures_take_the_median_of_every_turn_of_the_run():
    # Two measurements (two enqueue turns) of 3 turns each; times in seconds for 100 saves.
    first = {"order": {"n": 100, "queue_s": [0.011, 0.020, 0.012], "plain_s": [0.010, 0.010, 0.010]}}
    second = {"order": {"n": 100, "queue_s": [0.033, 0.013], "plain_s": [0.030, 0.010]}}
    figures = pairs.save_figures([first, None, second])
    order = figures["order"]
    assert order["time_ratio_each"] == pytest.approx([1.1, 2.0, 1.2, 1.1, 1.3])
    assert order["time_ratio"] == pytest.approx(1.2)
    assert order["queue_us"] == pytest.approx(130.0)  # median of 110, 200, 120, 330, 130
    assert order["plain_us"] == pytest.approx(100.0)
    assert pairs.save_figures([None, {}]) == {}


def test_enqueue_keeps_the_save_figures_of_the_run(monkeypatch: pytest.MonkeyPatch):
    def fake_enqueue_once(system: str, n_one: int, n_bulk: int) -> dict[str, Any]:
        out: dict[str, Any] = {"one": 1000.0, "bulk": 20000.0, "bulk_api": system}
        if system == "dbqueue":
            out["save_pairs"] = {"bare": {"n": 10, "queue_s": [0.012, 0.011], "plain_s": [0.010, 0.010]}}
        return out

    monkeypatch.setattr(run, "enqueue_once", fake_enqueue_once)
    monkeypatch.setattr(run, "log", lambda message: None)
    figures = {figure["system"]: figure for figure in run.enqueue(["raw", "dbqueue"], 10, 10)}
    bare = figures["dbqueue"]["save"]["bare"]
    assert len(bare["time_ratio_each"]) == 2 * run.ENQUEUE_REPEATS
    assert bare["time_ratio"] == pytest.approx(1.15)
    assert "save" not in figures["raw"]
    assert floors.save_ratio([{"enqueue": list(figures.values())}], "bare") == pytest.approx(1.15)


def test_drain_floors_are_ratios_within_each_run_then_the_median():
    runs = [
        a_run(16000, 20000, (400, 500, 300)),  # 0.80x raw, 32x the fastest peer (500)
        a_run(9000, 10000, (450, 300, 200)),  # 0.90x, 20x
        a_run(12000, 24000, (100, 100, 600)),  # 0.50x, 20x
    ]
    assert floors.drain_ratio(runs, ("dbqueue", "lease"), ("raw", "batch500"), 4) == pytest.approx(0.8)
    assert floors.peer_ratio(runs, ("dbqueue", "lease"), 4) == pytest.approx(20.0)
    assert floors.fastest_peer(runs[0], 4) == 500
    lease = next(f for f in floors.FLOORS if f.key == "lease-raw-4")
    assert lease.per_run({"runs": runs}) == pytest.approx([0.8, 0.9, 0.5])
    # Not measured with 1 worker: no figure rather than a made-up one.
    assert floors.drain_ratio(runs, ("dbqueue", "lease"), ("raw", "batch500"), 1) is None


def test_a_drain_that_failed_exactly_once_does_not_count():
    failed = a_run(16000, 20000, (400, 500, 300))
    failed["drain"][0]["exactly_once"] = "FAILED: 3 duplicate runs"
    assert floors.rate(failed, "dbqueue", "lease", 4) is None
    assert floors.drain_ratio([failed], ("dbqueue", "lease"), ("raw", "batch500"), 4) is None
    peers_failed = a_run(16000, 20000, (400, 500, 300))
    peers_failed["drain"][3]["exactly_once"] = "FAILED: 1/500 jobs ran"  # the fastest peer
    assert floors.peer_ratio([peers_failed], ("dbqueue", "lease"), 4) == pytest.approx(40.0)


def test_floors_say_met_or_missed_in_their_direction():
    at_least = next(f for f in floors.FLOORS if f.key == "lease-raw-4")
    at_most = next(f for f in floors.FLOORS if f.key == "save-order")
    assert (at_least.met(0.7), at_least.met(0.69), at_least.met(None)) == (True, False, None)
    assert (at_most.met(1.15), at_most.met(1.16)) == (True, False)
    assert at_least.shortfall(0.35) == pytest.approx(0.5)
    assert at_least.shortfall(0.9) == 0.0
    assert at_most.shortfall(1.38) == pytest.approx(0.2)
    assert at_least.target == "≥ 0.7×"
    assert next(f for f in floors.FLOORS if f.key == "pickup-p95").target == "≤ 50 ms"


def test_claim_cost_and_pickup_figures():
    results = {
        "claim_cost": {"levels": [{"finished": 0}, {"finished": 10**6, "ratio_to_first": 1.2}]},
        "runs": [
            {"drain": [], "enqueue": [], "pickup": [{"system": "dbqueue", "p95_ms": p}]} for p in (40, 60, 45)
        ],
    }
    figures = {floor.key: (value, met) for floor, value, met in floors.evaluate(results)}
    assert figures["claim-cost"] == (1.2, True)
    assert figures["pickup-p95"] == (45, True)
    assert figures["lease-raw-4"] == (None, None)


OLD_REPORT = """# Benchmarks

## Results (jobs/s unless stated; medians)

| system | enqueue one-by-one | 4 workers | pickup p50 / p95 | idle worker, queries/s |
|---|---|---|---|---|
| **django_dbqueue**, lease mode, batched outcomes | 2,542 | 16,254 | 24 / 48 ms | 21.2 |

| enqueue one-by-one: `save()` / raw INSERT + commit | 0.74× | | | ≥ 0.80 |
| bulk enqueue: `bulk_enqueue()` / raw executemany | 1.12× | | | ≥ 0.80 |

Claim time at 1,000,000 finished rows / empty table: **1.10×** (median of the rounds' ratios).

### Every drain (jobs/s per run)

| system | workers | run 1 | run 2 | run 3 |
|---|---|---|---|---|
| raw SQL, claim 500, one ack UPDATE per batch | 4 | 22,977 | 14,448 | 22,351 |
| **django_dbqueue**, lease mode, batched outcomes | 4 | 16,254 | 12,536 | 22,932 |
| dj_queue | 4 | 413 | 401 | 559 |
| django-tasks-db | 4 | 361 | – | 335 |
| django-q2 (ORM broker) | 4 | 392 | 376 | 429 |
"""


def test_before_reads_the_old_report_and_recomputes_its_floors():
    old = before.parse(OLD_REPORT)
    assert len(old["runs"]) == 3
    assert floors.rate(old["runs"][1], "tasksdb", "default", 4) is None  # "–": left out
    figures = {floor.key: value for floor, value, _ in floors.evaluate(old)}
    # lease / raw claim 500 per run: 0.707, 0.868, 1.026
    assert figures["lease-raw-4"] == pytest.approx(12536 / 14448)
    # lease / the fastest peer per run: 16,254/413, 12,536/401, 22,932/559
    assert figures["lease-peer-4"] == pytest.approx(16254 / 413)
    assert figures["bulk"] == pytest.approx(1.12)
    assert figures["claim-cost"] == pytest.approx(1.10)
    assert figures["pickup-p95"] == pytest.approx(48)
    assert figures["save-order"] is None  # the old harness had no plain twin
    assert before.parse("# nothing here\n") == {}


def test_report_puts_the_floors_first_with_before_and_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(report.before, "load", lambda root: before.parse(OLD_REPORT))
    monkeypatch.setattr(report, "chart", lambda rows, path: None)
    results = {
        "plan": {
            "quick": False,
            "runs": 1,
            "n_fast": 1,
            "n_per_job": 1,
            "n_claim1": 1,
            "n_peer": 1,
            "n_one": 1,
            "n_bulk": 1,
            "claims": 1,
        },
        "machine": {"commit": "abc1234"},
        "began": "b",
        "ended": "e",
        "complete": True,
        "runs": [a_run(10000, 20000, (400, 500, 300))],  # 0.5x raw: missed; 20x the fastest peer: met
    }
    out = tmp_path / "BENCHMARKS.md"
    report.write(results, out, tmp_path / "chart.png")
    text = out.read_text()
    assert text.index("## Floors") < text.index("## Machine and setup")
    lease = next(line for line in text.splitlines() if line.startswith("| Lease mode, 4 workers / raw"))
    assert lease.split(" | ")[2:] == ["0.87×", "0.50×", "**MISSED** by 29%", " |"]
    peer = next(line for line in text.splitlines() if line.startswith("| Lease mode, 4 workers / fastest"))
    assert peer.endswith("| 20.0× | met |  |")  # one run: no per-run column
    save = next(line for line in text.splitlines() if "(no domain fields)" in line)
    assert "not measured | not measured | – |" in save
