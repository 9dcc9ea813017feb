# ruff: noqa: RUF001 - BENCHMARKS.md is typeset (en dashes, multiplication signs)
"""The benchmark's floor arithmetic (bench/floors.py), the save() pairs (bench/pairs.py, bench/run.py),
the cost per job (bench/costs.py, bench/stmtcount.py's files), the quick plan (bench/run.py) and
the report's floors, cost and drain tables (bench/report.py). Measurements are made up here:
what is tested is the arithmetic and the typesetting, not a speed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from bench import costs, floors, pairs, report, run, stmtcount


def drain(
    system: str, variant: str, workers: int, rate: float, ok: bool = True, cpu_us: float = 30.0
) -> dict[str, Any]:
    return {
        "system": system,
        "variant": variant,
        "workers": workers,
        "rate": rate,
        "exactly_once": "ok" if ok else "FAILED: 1 duplicate runs",
        "rss": {"max_process_mb": 40.0, "total_mb": 40.0 * workers},
        "cpu_us_per_job": cpu_us,
        "statements_per_job": 0.02,
        "statement_kinds_per_job": {"SELECT": 0.01, "UPDATE": 0.01},
        "load": [[1.5, 1.0, 0.5], [2.25, 1.1, 0.6]],
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
    assert floors.drain_cost([failed], ("dbqueue", "lease"), 4, "cpu_us_per_job") is None
    peers_failed = a_run(16000, 20000, (400, 500, 300))
    peers_failed["drain"][3]["exactly_once"] = "FAILED: 1/500 jobs ran"  # the fastest peer
    assert floors.peer_ratio([peers_failed], ("dbqueue", "lease"), 4) == pytest.approx(40.0)


def test_floors_say_met_or_missed_in_their_direction():
    at_least = next(f for f in floors.FLOORS if f.key == "lease-raw-4")
    at_most = next(f for f in floors.FLOORS if f.key == "save-order")
    assert (at_least.met(0.6), at_least.met(0.59), at_least.met(None)) == (True, False, None)
    assert (at_most.met(1.1), at_most.met(1.11)) == (True, False)
    assert at_least.shortfall(0.3) == pytest.approx(0.5)
    assert at_least.shortfall(0.9) == 0.0
    assert at_most.shortfall(1.32) == pytest.approx(0.2)
    assert floors.verdict(at_least, 0.3) == "MISSED by 50%"
    assert floors.verdict(at_least, 0.61) == "met"
    assert floors.verdict(at_least, None) == "not measured"
    targets = {f.key: f.target for f in floors.FLOORS}
    assert targets["lease-raw-4"] == "≥ 0.6×"
    assert targets["atomic-peer-1"] == "≥ 3×"
    assert targets["atomic-cpu"] == "≤ 0.35 ms"
    assert targets["pickup-p95"] == "≤ 15 ms"
    assert targets["idle-qps"] == "≤ 65/s"


def test_every_line_of_the_issue_table_is_a_floor():
    keys = [f.key for f in floors.FLOORS]
    assert len(keys) == len(set(keys))
    expected = {
        "atomic-raw-1": 0.45,
        "atomic-peer-1": 3,
        "atomic-peer-4": 3,
        "atomic-cpu": 0.35,
        "grouped-raw-1": 0.5,
        "lease-raw-1": 0.6,
        "lease-raw-4": 0.6,
        "lease-peer-4": 30,
        "lease-cpu": 0.05,
        "save-raw": 0.7,
        "save-bare": 1.1,
        "save-order": 1.1,
        "bulk": 0.7,
        "pickup-p50": 8,
        "pickup-p95": 15,
        "idle-qps": 65,
        **{
            f"flow-{mode}-{server}": 0.5
            for mode in ("concurrency", "rate", "both")
            for server in ("mysql", "postgresql")
        },
        **{
            f"fair-{mode}-{server}-{ready}": bound
            for server in ("mysql", "postgresql")
            for ready in (10_000, 100_000)
            for mode, bound in (
                ("fair share, 100 keys", 0.7),
                ("fair share, 10,000 keys", 0.7),
                ("aging alone (30 s)", 0.9),
            )
        },
        "workflow-step": 1.3,
        "workflow-park": 2,
        "workflow-wake": 2,
        "claim-cost": 1.5,
    }
    assert {f.key: f.bound for f in floors.FLOORS} == expected


def test_the_workflow_step_floor_is_the_atomic_jobs_rate_over_the_workflows():
    floor = next(f for f in floors.FLOORS if f.key == "workflow-step")
    runs = [
        a_run(1, 1, (1, 1, 1), drains=[drain("dbqueue", "atomic", 1, 600, cpu_us=400), drain(*wf)])
        for wf in (("dbqueue", "workflow", 1, 500, True, 500), ("dbqueue", "workflow", 1, 400, True, 520))
    ]
    results = {"runs": runs}
    assert floor.figure(results) == pytest.approx((1.2 + 1.5) / 2)  # lower is better: a time ratio
    assert floor.beside is not None and "CPU per job 1.27×" in floor.beside(results)
    park = {"park_wake": {"park": 2.0, "wake": 3.5}}
    assert [f.figure(park) for f in floors.FLOORS if f.key in ("workflow-park", "workflow-wake")] == [
        2.0,
        3.5,
    ]
    assert [
        f.met(f.figure(park))
        for f in floors.FLOORS
        if f.key.startswith("workflow-") and f.key != "workflow-step"
    ] == [True, False]


def test_cpu_floors_are_the_median_over_the_runs_in_milliseconds():
    runs = [
        {
            "drain": [
                drain("dbqueue", "atomic", 1, 300, cpu_us=us),
                drain("raw", "claim100", 1, 900, cpu_us=60),
            ]
        }
        for us in (400.0, 300.0, 350.0)
    ]
    runs[1]["drain"][0]["exactly_once"] = "FAILED: 1 duplicate runs"  # 300 is left out
    atomic_cpu = next(f for f in floors.FLOORS if f.key == "atomic-cpu")
    value = atomic_cpu.figure({"runs": runs})
    assert value == pytest.approx(0.375)  # the median of 400 and 350 µs
    assert atomic_cpu.met(value) is False
    assert atomic_cpu.show(value) == "0.375 ms"
    assert atomic_cpu.beside is not None
    assert atomic_cpu.beside({"runs": runs}) == "raw claim 100, ack each 0.06 ms"
    assert floors.drain_cost(runs, ("dbqueue", "atomic"), 1, "statements_per_job") == pytest.approx(0.02)


def test_claim_cost_pickup_and_flow_figures():
    results = {
        "claim_cost": {"levels": [{"finished": 0}, {"finished": 10**6, "ratio_to_first": 1.2}]},
        "flow": {"postgresql": {"concurrency limit": 0.4, "rate limit": 0.6}},
        "runs": [
            {
                "drain": [],
                "enqueue": [],
                "pickup": [{"system": "dbqueue", "p50_ms": p / 2, "p95_ms": p, "idle_queries_per_s": 20.0}],
            }
            for p in (14, 60, 12)
        ],
    }
    figures = {floor.key: (value, met) for floor, value, met in floors.evaluate(results)}
    assert figures["claim-cost"] == (1.2, True)
    assert figures["pickup-p95"] == (14, True)
    assert figures["pickup-p50"] == (7, True)
    assert figures["idle-qps"] == (20.0, True)
    assert figures["flow-concurrency-postgresql"] == (0.4, False)
    assert figures["flow-rate-postgresql"] == (0.6, True)
    assert figures["flow-both-postgresql"] == (None, None)
    assert figures["flow-rate-mysql"] == (None, None)
    assert figures["lease-raw-4"] == (None, None)


def test_fair_claim_figures_come_by_server_and_backlog():
    results = {
        "fair": {"postgresql": {"10000": {"fair share, 100 keys": 0.68, "aging alone (30 s)": 0.95}}},
        "runs": [],
    }
    figures = {floor.key: (value, met) for floor, value, met in floors.evaluate(results)}
    assert figures["fair-fair share, 100 keys-postgresql-10000"] == (0.68, False)
    assert figures["fair-aging alone (30 s)-postgresql-10000"] == (0.95, True)
    assert figures["fair-fair share, 100 keys-postgresql-100000"] == (None, None)
    assert figures["fair-fair share, 10,000 keys-mysql-10000"] == (None, None)


def test_cost_per_job_counts_the_jobs_between_the_two_samples():
    sampled = {
        "cpu_first": 1.0,
        "statements_first": {"SELECT": 100},
        "first_seen": 200,
        "cpu_last": 1.9,
        "statements_last": {"SELECT": 1900, "COMMIT": 1800},
    }
    cost = costs.per_job(sampled, 2000)
    assert cost["statement_kinds_per_job"] == pytest.approx({"COMMIT": 1.0, "SELECT": 1.0})
    assert (cost["cpu_us_per_job"], cost["statements_per_job"], cost["cost_jobs"]) == pytest.approx(
        (500.0, 2.0, 1800)
    )
    # The first sample already saw every job, or the last never came: nothing to divide.
    assert costs.per_job({**sampled, "first_seen": 2000}, 2000)["cpu_us_per_job"] is None
    unfinished = {"cpu_first": 1.0, "statements_first": {"SELECT": 1}, "first_seen": 5}
    assert costs.per_job(unfinished, 10)["statements_per_job"] is None
    assert costs.per_job({}, 10)["cost_jobs"] == 0


def test_statement_counts_add_up_the_files_of_the_processes(tmp_path: Path):
    stmtcount.write_counts(tmp_path, 101, {"SELECT": 30, "COMMIT": 10})
    stmtcount.write_counts(tmp_path, 102, {"SELECT": 2})
    stmtcount.write_counts(tmp_path, 101, {"SELECT": 31, "COMMIT": 10})  # rewritten, not added
    (tmp_path / "103.tmp").write_text('{"SELECT": 999}')  # a write in flight is not read
    assert stmtcount.kinds(tmp_path) == {"SELECT": 33, "COMMIT": 10}
    assert stmtcount.total(tmp_path) == 43
    assert stmtcount.total(tmp_path, [102]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["101", "102", "103.tmp"]


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        (b"SELECT `dbqapp_noopjob`.`id` FROM x", "SELECT"),
        ("  update job SET state = 'succeeded'", "UPDATE"),
        (b"SAVEPOINT `s1`", "SAVEPOINT"),
        (b"", "?"),
    ],
)
def test_a_statement_is_counted_under_its_first_word(sql: bytes | str, kind: str):
    assert stmtcount.kind_of(sql) == kind


def test_statement_kinds_are_medians_over_the_runs():
    runs = [{"drain": [drain("dbqueue", "atomic", 1, 300)]} for _ in range(3)]
    runs[0]["drain"][0]["statement_kinds_per_job"] = {"SELECT": 1.0, "COMMIT": 1.0, "SAVEPOINT": 3.0}
    runs[1]["drain"][0]["statement_kinds_per_job"] = {"SELECT": 2.0, "COMMIT": 1.0}
    runs[2]["drain"][0]["statement_kinds_per_job"] = {"SELECT": 3.0, "COMMIT": 1.0}
    kinds = floors.statement_kinds(runs, ("dbqueue", "atomic"), 1)
    assert kinds == {"COMMIT": 1.0, "SAVEPOINT": 0.0, "SELECT": 2.0}  # SAVEPOINT: 3, 0, 0


def _args(**given: Any) -> argparse.Namespace:
    defaults = {"quick": False, "runs": 0, "systems": "", "scale": 1.0, "out": ""}
    return argparse.Namespace(**{**defaults, **given})


def test_the_quick_plan_is_ours_against_the_raw_loops_in_three_rounds():
    plan = run.make_plan(_args(quick=True))
    assert (plan.runs, plan.systems, plan.workers) == (3, ("dbqueue", "raw"), (1, 4))
    assert run.variants("dbqueue", plan.only) == (
        "lease",
        "atomic",
        "grouped",
        "grouped-optimistic",
        "workflow",
    )
    assert run.variants("raw", plan.only) == ("claim100", "batch", "batch500")
    assert not plan.contention and not plan.claim_cost
    full = run.make_plan(_args())
    assert (full.runs, full.workers, full.only) == (3, (1, 2, 4), {})
    assert run.variants("dbqueue", full.only) == tuple(run.OURS_VARIANTS)
    small = run.make_plan(_args(quick=True, runs=1, scale=0.2))
    assert (small.runs, small.n_fast, small.n_per_job, small.n_one) == (1, 4000, 600, 100)
    # The quick drains keep the full run's backlogs: only enqueues and scenarios are fewer.
    quick = run.make_plan(_args(quick=True))
    assert (quick.n_fast, quick.n_per_job) == (full.n_fast, full.n_per_job)
    assert run.output(_args(quick=True)).report.name == "BENCHMARKS-quick.md"
    assert run.output(_args()).report == run.OUT_MD
    elsewhere = run.output(_args(out="/tmp/report.md"))
    assert (str(elsewhere.report), str(elsewhere.chart)) == ("/tmp/report.md", "/tmp/report.png")


def test_flow_figures_are_taken_only_from_files_written_during_the_run(tmp_path: Path):
    results = {"began": "2026-11-27T12:00:00+00:00", "runs": []}
    began = run.datetime.fromisoformat(results["began"]).timestamp()
    fresh, stale = tmp_path / "flow-postgresql.json", tmp_path / "flow-mysql.json"
    fresh.write_text('{"server": "postgresql", "ratios": {"rate limit": 0.61}}')
    stale.write_text('{"server": "mysql", "ratios": {"rate limit": 0.2}}')
    os.utime(fresh, (began + 60, began + 60))
    os.utime(stale, (began - 60, began - 60))
    assert run.with_flow(results, tmp_path)["flow"] == {"postgresql": {"rate limit": 0.61}}
    os.utime(fresh, (began - 1, began - 1))
    assert "flow" not in run.with_flow(results, tmp_path)


def test_fair_figures_are_kept_by_server_and_backlog(tmp_path: Path):
    results = {"began": "2026-11-27T12:00:00+00:00", "runs": []}
    began = run.datetime.fromisoformat(results["began"]).timestamp()
    for ready, ratio in ((10000, 0.8), (100000, 0.75)):
        path = tmp_path / f"fair-mysql-{ready}.json"
        path.write_text(
            f'{{"server": "mysql", "ready": {ready}, "ratios": {{"fair share, 100 keys": {ratio}}}}}'
        )
        os.utime(path, (began + 60, began + 60))
    stale = tmp_path / "fair-postgresql-10000.json"
    stale.write_text('{"server": "postgresql", "ready": 10000, "ratios": {"fair share, 100 keys": 0.1}}')
    os.utime(stale, (began - 60, began - 60))
    assert run.with_flow(results, tmp_path)["fair"] == {
        "mysql": {"10000": {"fair share, 100 keys": 0.8}, "100000": {"fair share, 100 keys": 0.75}}
    }


def _results(runs: list[dict[str, Any]], workers: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    return {
        "plan": {
            "quick": False,
            "runs": len(runs),
            "workers": list(workers),
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
        "runs": runs,
    }


def test_report_puts_the_floors_first_with_the_issue_figures_and_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(report, "chart", lambda rows, path: None)
    # 0.5x raw: missed; 32x the fastest peer: met
    picked = {
        "system": "dbqueue",
        "p50_ms": 10,
        "p95_ms": 20,
        "idle_queries_per_s": 21.2,
        "idle_statements_per_s": 30.5,
    }
    results = _results([a_run(10000, 20000, (250, 312.5, 300), pickup=[picked])])
    out = tmp_path / "BENCHMARKS.md"
    report.write(results, out, tmp_path / "chart.png")
    text = out.read_text()
    assert text.index("## Floors (issues #33 and #37)") < text.index("## Machine and setup")
    lines = text.splitlines()
    lease = next(line for line in lines if line.startswith("| Lease mode, 4 workers / raw"))
    assert lease.split(" | ")[1:] == ["≥ 0.6×", "0.75×", "0.29×", "0.50×", "**MISSED by 17%**", " |"]
    peer = next(line for line in lines if line.startswith("| Lease mode, 4 workers / fastest"))
    assert peer.endswith("| 39× | 26× | 32.0× | met |  |")  # one round: no per-round column
    save = next(line for line in lines if "(no domain fields)" in line)
    assert save.endswith("| not measured | not measured |  |")
    assert "![drain throughput](chart.png)" in lines
    table = text.split("## Results")[1].splitlines()  # the results table comes first there
    ours = next(line for line in table if line.startswith("| **django_dbqueue**, lease mode"))
    # Drained with 4 workers only: no cost at 1 worker, rather than a made-up one.
    assert ours.endswith("| 10,000 | – | – | 10 / 20 ms | 21.2 (30.5) | 40 MB |")
    raw = next(line for line in table if line.startswith("| raw SQL, claim 500"))
    assert raw.endswith("| 20,000 | – | – | – | – | 40 MB |")
    drains = next(
        line for line in lines if line.startswith("| **django_dbqueue**, lease mode") and "| 4 |" in line
    )
    assert drains == "| **django_dbqueue**, lease mode, batched outcomes | 4 | 10,000 (1.5→2.2) |"


def test_report_gives_cpu_and_statements_per_job_for_the_worker_counts_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(report, "chart", lambda rows, path: None)
    one = [
        drain("dbqueue", "atomic", 1, 300, cpu_us=400.0),
        drain("dbqueue", "atomic", 4, 600, cpu_us=500.0),
        drain("raw", "claim100", 1, 900, cpu_us=60.0),
    ]
    runs = [{"drain": one, "enqueue": [], "pickup": []} for _ in range(3)]
    runs[2]["drain"] = [{**one[0], "cpu_us_per_job": 700.0}, *one[1:]]
    out = tmp_path / "quick.md"
    report.write(_results(runs, workers=(1, 4)), out, tmp_path / "quick.png")
    lines = out.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| system | CPU µs, 1 worker"))
    assert header == (
        "| system | CPU µs, 1 worker | CPU µs, 4 workers | statements, 1 worker | statements, 4 workers "
        "| statements by kind, 1 worker |"
    )
    atomic = [line for line in lines if line.startswith("| **django_dbqueue**, atomic mode (1 job")]
    # the cost table: median of 400, 400, 700
    assert atomic[1].endswith("| 400 | 500 | 0.020 | 0.020 | SELECT 0.010 · UPDATE 0.010 |")
    assert "| 300 | 600 | 400 µs | 0.020 |" in atomic[0]  # the results table: 1 and 4 workers only
    cpu = next(line for line in lines if line.startswith("| Atomic mode, worker CPU per job"))
    assert (
        "| 0.4 ms (raw claim 100, ack each 0.06 ms) | **MISSED by 14%** | 0.4 ms / 0.4 ms / 0.7 ms |" in cpu
    )
