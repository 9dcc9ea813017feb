"""The benchmark's enqueue figures: django_dbqueue and raw SQL are measured back to back in every
turn, and the save()/bulk ratios are the medians of those paired ratios (bench/run.py,
bench/report.py). The measurements are replaced by a fake here: what is tested is the order of
the turns and the arithmetic, not a speed."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report, run

SYSTEMS = ["djqueue", "dbqueue", "tasksdb", "raw", "q2"]


@pytest.mark.parametrize(
    ("turns", "first", "expected"),
    [
        (
            ["djqueue", "dbqueue", "tasksdb", "raw", "q2"],
            "dbqueue",
            ["djqueue", "dbqueue", "raw", "tasksdb", "q2"],
        ),
        (
            ["djqueue", "dbqueue", "tasksdb", "raw", "q2"],
            "raw",
            ["djqueue", "raw", "dbqueue", "tasksdb", "q2"],
        ),
        (["raw", "q2", "dbqueue"], "dbqueue", ["dbqueue", "raw", "q2"]),
        (["q2", "tasksdb", "raw"], "dbqueue", ["q2", "tasksdb", "raw"]),  # no pair: unchanged
    ],
)
def test_paired_turns_puts_the_pair_side_by_side(turns: list[str], first: str, expected: list[str]):
    assert run.paired_turns(turns, first) == expected


def test_enqueue_measures_the_pair_back_to_back_and_keeps_their_ratios(monkeypatch: pytest.MonkeyPatch):
    calls: list[str] = []
    # The raw loop's rate swings from turn to turn, as on the shared machine; django_dbqueue runs
    # at 0.75x of whatever the raw loop did in the same turn.
    raw_rates = [1000.0, 4000.0, 2000.0, 3000.0, 1500.0]

    def fake_enqueue_once(system: str, n_one: int, n_bulk: int) -> dict[str, Any]:
        calls.append(system)
        turn = (sum(1 for call in calls if call in run.ENQUEUE_PAIR) - 1) // 2
        if system in run.ENQUEUE_PAIR:
            rate = raw_rates[turn] * (0.75 if system == "dbqueue" else 1.0)
            return {"one": rate, "bulk": rate * 20, "bulk_api": system}
        return {"one": 100.0, "bulk": None, "bulk_api": "none"}

    monkeypatch.setattr(run, "enqueue_once", fake_enqueue_once)
    monkeypatch.setattr(run, "log", lambda message: None)
    figures = run.enqueue(SYSTEMS, 10, 10)

    assert len(calls) == run.ENQUEUE_REPEATS * len(SYSTEMS)
    for turn in range(run.ENQUEUE_REPEATS):
        order = calls[turn * len(SYSTEMS) : (turn + 1) * len(SYSTEMS)]
        first = run.ENQUEUE_PAIR[turn % 2]
        at = order.index(first)
        assert order[at : at + 2] == [first, next(s for s in run.ENQUEUE_PAIR if s != first)], order
    ours = next(figure for figure in figures if figure["system"] == "dbqueue")
    assert ours["one_ratio_each"] == pytest.approx([0.75] * run.ENQUEUE_REPEATS)
    assert ours["bulk_ratio_each"] == pytest.approx([0.75] * run.ENQUEUE_REPEATS)
    assert ours["one_ratio"] == pytest.approx(0.75)
    assert ours["one"] == pytest.approx(0.75 * 2000.0)  # the median of its own measurements
    assert "one_ratio" not in next(figure for figure in figures if figure["system"] == "raw")


def test_enqueue_ratio_takes_the_paired_median_and_reads_older_results():
    paired_run = {
        "enqueue": [
            {"system": "dbqueue", "one": 2000.0, "bulk": 90000.0, "one_ratio": 0.74, "bulk_ratio": 1.02},
            {"system": "raw", "one": 3000.0, "bulk": 90000.0},
        ]
    }
    older_run = {
        "enqueue": [
            {"system": "dbqueue", "one": 1500.0, "bulk": 80000.0},
            {"system": "raw", "one": 2000.0, "bulk": 100000.0},
        ]
    }
    assert report._enqueue_ratio([paired_run], "one") == pytest.approx(0.74)
    assert report._enqueue_ratio([older_run], "one") == pytest.approx(0.75)
    assert report._enqueue_ratio([paired_run, older_run, paired_run], "bulk") == pytest.approx(1.02)
    assert report._enqueue_ratio([{"enqueue": [{"system": "raw", "one": 1.0, "bulk": 1.0}]}], "one") is None
