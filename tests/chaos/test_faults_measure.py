"""The fault table's counters (tests/chaos/faults/measure.py): pure arithmetic, no database."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from django_dbqueue.compat import UTC
from tests.chaos.faults.measure import Row, count

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(kind: str, pk: int, state: str = "succeeded", attempts: int = 1, after: float | None = 1.0) -> Row:
    finished = None if after is None else T0 + timedelta(seconds=after)
    return Row(kind, pk, state, attempts, "", finished)


def test_a_clean_run_counts_nothing_and_recovery_runs_to_the_last_good_finish() -> None:
    rows = [_row("L", 1, after=2.0), _row("A", 2, after=3.5), _row("A", 9, "failed", 2, after=9.0)]
    runs = Counter({("L", 1): 1, ("A", 2): 1})
    counts = count(rows, {"L": {1}, "A": {2}}, {"A": {9}}, runs, {"A"}, T0 + timedelta(seconds=0.5))
    assert (counts.lost, counts.doubled, counts.stuck, counts.good_failed, counts.reruns) == (0, 0, 0, 0, 0)
    assert counts.recovery == 3.0  # the poison row's own finish does not count
    assert counts.poison["A"].startswith("FAILED (2 attempts)")
    assert counts.passed


def test_each_violation_is_counted_where_it_belongs() -> None:
    rows = [
        _row("A", 1),  # atomic, effect committed twice: doubled
        _row("L", 2),  # lease, ran twice: a re-run, allowed
        _row("L", 3),  # succeeded without its effect: lost
        _row("L", 5, "running", after=None),  # stuck
        _row("A", 6, "failed", 3),  # a good row that failed
        _row("A", 7, "ready", after=None),  # the poison row, stuck
    ]
    runs = Counter({("A", 1): 2, ("L", 2): 3, ("L", 5): 1, ("A", 6): 0})
    good = {"A": {1, 6}, "L": {2, 3, 4, 5}}  # 4 is gone: lost
    counts = count(rows, good, {"A": {7}}, runs, {"A"}, T0)
    assert counts.doubled == 1 and counts.reruns == 1 and counts.most_runs == 3
    assert counts.lost == 2 and counts.stuck == 2 and counts.good_failed == 1
    assert counts.recovery is None and not counts.passed
