"""The fault table's counters, from what the tables hold at the end of a scenario (pure
arithmetic: tests/chaos/test_faults_measure.py checks it).

* **lost**: an inserted row that is gone, or a good row SUCCEEDED whose handler never
  committed its ledger row (its effect is missing);
* **doubled**: an atomic row with more than one committed ledger row (its database effect
  committed twice: invariant 2). Lease rows that ran again are counted apart (``reruns``):
  at-least-once allows them;
* **stuck**: a row still READY or RUNNING when the scenario ended;
* **good failed**: a good row that ended FAILED;
* **recovery**: seconds from the fault to the last good row's ``queue_finished_at`` (both
  on the database clock).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FINISHED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Row:
    kind: str  # the model's name, as the ledger records it
    pk: int
    state: str
    attempts: int
    error: str
    finished_at: datetime | None


@dataclass
class Counts:
    good: int = 0
    lost: int = 0
    doubled: int = 0
    stuck: int = 0
    good_failed: int = 0
    reruns: int = 0  # lease rows whose handler ran more than once (allowed)
    most_runs: int = 0  # the most runs of one good row
    most_attempts: int = 0  # the highest queue_attempts of a good row
    recovery: float | None = None  # None: not every good row finished
    poison: dict[str, str] = field(default_factory=dict)  # kind -> "STATE (attempts): reason"

    @property
    def passed(self) -> bool:
        return not (self.lost or self.doubled or self.stuck or self.good_failed) and self.recovery is not None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "passed": self.passed}


def summary(error: str) -> str:
    """A stored reason in one short line: a traceback by its first and last lines."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if len(lines) > 2 and "Traceback" in error:
        return f"{lines[0][:90]} ... {lines[-1][:110]}"
    return " ".join(" ".join(lines).split())[:160]


def count(
    rows: list[Row],
    good: dict[str, set[int]],
    poison: dict[str, set[int]],
    runs: Counter[tuple[str, int]],
    atomic: set[str],
    fault_at: datetime | None,
) -> Counts:
    """``good``/``poison``: the pks inserted, by kind; ``runs``: committed ledger rows by
    (kind, pk); ``atomic``: the kinds in atomic mode."""
    by_key = {(row.kind, row.pk): row for row in rows}
    counts = Counts(good=sum(len(pks) for pks in good.values()))
    last_finish: datetime | None = None
    every_good_finished = True
    for kind, pks in good.items():
        for pk in pks:
            row = by_key.get((kind, pk))
            ran = runs[(kind, pk)]
            counts.most_runs = max(counts.most_runs, ran)
            if row is None:
                counts.lost += 1
                every_good_finished = False
                continue
            counts.most_attempts = max(counts.most_attempts, row.attempts)
            if row.state == "succeeded" and ran == 0:
                counts.lost += 1
            if ran > 1:
                if kind in atomic:
                    counts.doubled += 1
                else:
                    counts.reruns += 1
            if row.state == "failed":
                counts.good_failed += 1
            if row.state not in FINISHED:
                counts.stuck += 1
                every_good_finished = False
            elif row.finished_at is not None:
                last_finish = max(last_finish or row.finished_at, row.finished_at)
    for kind, pks in poison.items():
        for pk in pks:
            row = by_key.get((kind, pk))
            if row is None:
                counts.lost += 1
                counts.poison[kind] = "gone"
                continue
            if row.state not in FINISHED:
                counts.stuck += 1
            if kind in atomic and runs[(kind, pk)] > 1:
                counts.doubled += 1
            reason = summary(row.error)
            counts.poison[kind] = f"{row.state.upper()} ({row.attempts} attempts): {reason}"
    if every_good_finished and last_finish is not None and fault_at is not None:
        counts.recovery = round(max((last_finish - fault_at).total_seconds(), 0.0), 2)
    return counts
