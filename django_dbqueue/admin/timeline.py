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
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Max
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from django_dbqueue.compat import UTC

from ..backends import aware
from ..queue.history import AttemptOutcome, attempt_model

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
    # Buckets are cut on this host's clock (a chart, not a fence: a skew of seconds only
    # shifts it); the current bucket is the last one, the span covers whole buckets.
    now = timezone.now()
    last = trunc_python(now, step)
    first = last - (length - step)
    starts = [first + step * i for i in range(int(length / step))]
    # A bucket that ended a while ago no longer changes (attempts are written as they
    # finish): it is read from the cache, and only the rest from the history.
    closed = [start for start in starts if start + step <= now - SETTLED]
    keys = {start: _key(using, label, step, start) for start in closed}
    cached = cache.get_many(list(keys.values()))
    groups: dict[datetime, list[Group]] = {
        start: cached[keys[start]] for start in closed if keys[start] in cached
    }
    missing = [start for start in starts if start not in groups]
    if missing:
        fresh = _read(using, label, trunc, missing[0])
        groups.update({start: fresh.get(start, []) for start in missing})
        cache.set_many({keys[start]: groups[start] for start in missing if start in keys}, CACHE_SECONDS)
    return Timeline(span, [_bucket(start, groups[start]) for start in starts])


#: One outcome's numbers in one bucket: outcome, count, mean run, mean wait, longest wait.
Group = tuple[str, int, float | None, float | None, float | None]
#: How long after its end a bucket is taken as final, and how long the cache keeps it.
SETTLED = timedelta(minutes=2)
CACHE_SECONDS = 26 * 3600


def _key(using: str, label: str, step: timedelta, start: datetime) -> str:
    return f"dbqueue:timeline:{using}:{label}:{int(step.total_seconds())}:{int(start.timestamp())}"


def _read(using: str, label: str, trunc: Any, since: datetime) -> dict[datetime, list[Group]]:
    """The grouped statement: one row per bucket and outcome from ``since`` on."""
    rows = (
        attempt_model()
        ._default_manager.using(using)
        .filter(model=label, finished_at__gte=since)
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
    found: dict[datetime, list[Group]] = {}
    for row in rows:
        group = (
            row["outcome"],
            row["n"],
            _seconds(row["run"]),
            _seconds(row["wait"]),
            _seconds(row["wait_max"]),
        )
        found.setdefault(aware(row["bucket"]), []).append(group)
    return found


def _bucket(start: datetime, groups: list[Group]) -> Bucket:
    bucket = Bucket(start, counts={outcome: n for outcome, n, *_ in groups})
    bucket.run = _mean([(n, run) for _o, n, run, _w, _m in groups])
    bucket.wait = _mean([(n, wait) for _o, n, _r, wait, _m in groups])
    longest = [most for *_, most in groups if most is not None]
    bucket.wait_max = max(longest) if longest else None
    return bucket


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


OUTCOMES = tuple(AttemptOutcome)
