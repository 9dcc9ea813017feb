"""The dashboard over time: throughput, failures and latencies of one queue model, from the
attempt history, in buckets of a minute (the last hour) or an hour (the last day).

One grouped statement per chart set, bounded by time and read from the history's
``dbqueue_attempt_timeline`` index alone (``model, finished_at, outcome, claimed_at,
due_at``): the database counts and averages, Python only places at most a few hundred
groups. Buckets are cut by Django's ``Trunc`` functions, which carry the per-database SQL
(at UTC, so MySQL needs no time zone tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Max
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from ..backends import aware
from ..history import AttemptOutcome, attempt_model

#: The spans a dashboard shows: name -> (length, bucket, bucket function).
SPANS: dict[str, tuple[timedelta, timedelta, Any]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=1), TruncMinute),
    "day": (timedelta(days=1), timedelta(hours=1), TruncHour),
}


@dataclass
class Bucket:
    start: datetime
    counts: dict[str, int] = field(default_factory=dict)
    #: Mean seconds from claim to outcome, and from due to claim (the pickup latency),
    #: weighted over the bucket's outcomes; None without attempts.
    run: float | None = None
    wait: float | None = None
    wait_max: float | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class Timeline:
    span: str
    buckets: list[Bucket]

    def total(self, outcome: str) -> int:
        return sum(bucket.counts.get(outcome, 0) for bucket in self.buckets)


def _seconds(value: Any) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else None


def _between(later: str, earlier: str) -> ExpressionWrapper:
    return ExpressionWrapper(F(later) - F(earlier), output_field=DurationField())


def timeline(label: str, using: str, span: str = "hour") -> Timeline:
    """Attempts of the queue model ``label`` over the last ``span`` ("hour" or "day")."""
    if span not in SPANS:
        raise ValueError(f"span must be one of {sorted(SPANS)}, not {span!r}")
    length, step, trunc = SPANS[span]
    history = attempt_model()._default_manager.using(using)
    # Buckets are cut on this host's clock (a chart, not a fence: a skew of seconds only
    # shifts it); the current bucket is the last one, the span covers whole buckets.
    last = trunc_python(timezone.now(), step)
    first = last - (length - step)
    rows = (
        history.filter(model=label, finished_at__gte=first)
        .annotate(bucket=trunc("finished_at", tzinfo=UTC))
        .values("bucket", "outcome")
        .annotate(
            n=Count("pk"),
            run=Avg(_between("finished_at", "claimed_at")),
            wait=Avg(_between("claimed_at", "due_at")),
            wait_max=Max(_between("claimed_at", "due_at")),
        )
        .order_by()
    )
    buckets = {first + step * i: Bucket(first + step * i) for i in range(int(length / step))}
    weights: dict[datetime, list[tuple[int, float | None, float | None]]] = {}
    for row in rows:
        bucket = buckets.get(aware(row["bucket"]))
        if bucket is None:  # a clock step between the statements: outside the span
            continue
        bucket.counts[row["outcome"]] = row["n"]
        weights.setdefault(bucket.start, []).append((row["n"], _seconds(row["run"]), _seconds(row["wait"])))
        wait_max = _seconds(row["wait_max"])
        if wait_max is not None:
            bucket.wait_max = max(bucket.wait_max or 0.0, wait_max)
    for start, parts in weights.items():
        buckets[start].run = _mean([(n, run) for n, run, _ in parts])
        buckets[start].wait = _mean([(n, wait) for n, _, wait in parts])
    return Timeline(span, list(buckets.values()))


def _mean(parts: list[tuple[int, float | None]]) -> float | None:
    known = [(n, value) for n, value in parts if value is not None]
    count = sum(n for n, _ in known)
    return sum(n * value for n, value in known) / count if count else None


def trunc_python(moment: datetime, step: timedelta) -> datetime:
    """``moment`` cut down to its bucket, as the database's ``Trunc`` cuts it (UTC)."""
    moment = moment.astimezone(UTC)
    if step >= timedelta(hours=1):
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(second=0, microsecond=0)


OUTCOMES = (AttemptOutcome.SUCCEEDED, AttemptOutcome.RETRIED, AttemptOutcome.FAILED, AttemptOutcome.LOST)
