"""The soak's arithmetic on made-up numbers (no database, no processes; in ``make test``): the
accounting finds a lost item, a doubled effect, an unexplained re-run; slopes and percentiles
are what they should be."""

from __future__ import annotations

import pytest

from tests.soak.analysis import MUST_BE_ZERO, account, latency_windows, percentile, rss_summary, slope
from tests.soak.work import plan

SEED = 7
KILLED_PID, LIVE_PID = 111, 222


def world(count: int = 400) -> tuple[list[int], dict, dict]:
    """A run where everything went right: items finished as planned, half of the succeeded ones
    purged, every run in the ledger (a flaky message ran twice)."""
    rows, runs = {}, {}
    for n in range(count):
        item = plan(n, SEED)
        key = (item.is_message, n)
        if item.fail == "poison":
            rows[key] = ("failed", "ValueError: soak: poison")
            runs[key] = [(1, LIVE_PID)] if item.is_message else []  # atomic: rolled back
        else:
            if n % 2:
                rows[key] = ("succeeded", "")
            runs[key] = [(1, LIVE_PID), (2, LIVE_PID)] if item.fail == "flaky" else [(1, LIVE_PID)]
    return list(range(count)), rows, runs


def bad(counters: dict[str, int]) -> dict[str, int]:
    return {name: counters[name] for name in MUST_BE_ZERO if counters.get(name)}


def first(kind: str, fail: str = "") -> int:
    return next(
        n
        for n in range(10_000)
        if plan(n, SEED).is_message == (kind == "message") and plan(n, SEED).fail == fail
    )


def test_the_plan_has_every_kind_of_item() -> None:
    items = [plan(n, SEED) for n in range(4000)]
    assert {i.fail for i in items if i.is_message} == {"", "flaky", "poison"}
    assert {i.fail for i in items if not i.is_message} == {"", "poison"}
    assert plan(5, SEED) == plan(5, SEED) and 2 <= plan(5, SEED).ms <= 200


def test_a_clean_run_has_nothing_to_report() -> None:
    expected, rows, runs = world()
    counters = account(expected, SEED, rows, runs, killed=set())
    assert bad(counters) == {}
    assert counters["messages published"] + counters["tasks published"] == 400
    assert counters["messages purged"] > 0 and counters["message runs that failed as planned"] > 0


def test_an_item_left_ready_is_lost() -> None:
    expected, rows, runs = world()
    n = first("task")
    rows[False, n] = ("ready", "")
    assert bad(account(expected, SEED, rows, runs, set())) == {"lost (not finished)": 1}


def test_a_purged_message_that_never_ran_is_found() -> None:
    expected, rows, runs = world()
    n = first("message")
    rows.pop((True, n), None)
    runs.pop((True, n))
    assert bad(account(expected, SEED, rows, runs, set())) == {"messages succeeded that never ran": 1}


def test_an_atomic_effect_committed_twice_or_with_a_failure_is_found() -> None:
    expected, rows, runs = world()
    runs[False, first("task")].append((2, KILLED_PID))
    runs[False, first("task", "poison")] = [(3, LIVE_PID)]
    assert bad(account(expected, SEED, rows, runs, {KILLED_PID})) == {
        "tasks whose effects committed more than once": 1,
        "tasks failed with a committed effect": 1,
    }


def test_a_message_rerun_is_explained_only_by_a_kill() -> None:
    expected, rows, runs = world()
    n = first("message")
    runs[True, n] = [(1, KILLED_PID), (2, LIVE_PID)]
    counters = account(expected, SEED, rows, runs, {KILLED_PID})
    assert bad(counters) == {} and counters["message re-runs after a SIGKILL (at-least-once)"] == 1
    assert bad(account(expected, SEED, rows, runs, set())) == {"message re-runs not explained by a kill": 1}


def test_wrong_states_and_missing_reasons_are_found() -> None:
    expected, rows, runs = world()
    rows[True, first("message", "poison")] = ("succeeded", "")
    rows[False, first("task", "poison")] = ("failed", "")
    assert bad(account(expected, SEED, rows, runs, set())) == {
        "wrong final state": 1,
        "failed without a reason": 1,
    }


def test_slope_and_percentiles() -> None:
    assert slope([(0, 10), (1, 12), (2, 14), (3, 16)]) == pytest.approx(2.0)
    assert slope([(0, 1), (1, 2)]) is None and slope([(1, 1), (1, 2), (1, 3)]) is None
    assert percentile(list(range(1, 101)), 50) == 50 and percentile(list(range(1, 101)), 95) == 95
    assert percentile([], 50) is None


def test_rss_slope_skips_warm_up_and_the_capacity_phase() -> None:
    # 40 MB at start, +5 MB in the first minute (imports), then +100 KB a minute.
    samples = [(-30.0, 40_000), (0.0, 45_000)] + [(60.0 * m, 45_000 + 100 * m) for m in range(1, 11)]
    summary = rss_summary(samples, warmup=60)
    assert summary["slope_kb_per_min"] == pytest.approx(100.0)
    assert summary["max_kb"] == 46_000 and summary["fitted_minutes"] == 9


def test_latency_windows() -> None:
    points = [(t, 0.010) for t in range(0, 60)] + [(t, 0.020) for t in range(60, 120)] + [(-5, 9.0)]
    windows = latency_windows(points, 60)
    assert [(w["from_min"], w["claims"], w["p50_ms"]) for w in windows] == [(0.0, 60, 10.0), (1.0, 60, 20.0)]
