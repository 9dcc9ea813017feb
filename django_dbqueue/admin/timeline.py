"""The dashboard over time: throughput, failures and latencies of one queue model, from the
attempt history, in buckets of a minute (the last hour) or an hour (the last day).

One statement per chart set, bounded by time and read from the history's
``dbqueue_attempt_timeline`` index alone (``model, finished_at, outcome, claimed_at,
due_at``). The hour's chart is one grouped statement: the database counts and averages,
Python only places at most a few hundred groups; its buckets are cut by Django's ``Trunc``
functions, which carry the per-database SQL (at UTC, so MySQL needs no time zone tables).

The day's chart reads a bounded sample instead: a chart of 24 bars needs no million rows. Each
hour is cut into ``DAY_SLICES`` slices of twenty minutes, and each slice gives at most
``DAY_SLICE_ROWS`` attempts, its first ones in the index (one ``UNION ALL`` of index range
reads). A slice with fewer attempts is read whole and counted exactly; a full one stands for the
rest of its slice at the rate its rows arrived (``(rows - 1) / time they covered``), and the
bucket is marked estimated. So the first view reads at most 24 * 3 * 100 = 7,200 attempts
however busy the day was: at 1,000,000 attempts in one day the grouped statement read every one
(3-6 s on MariaDB, 0.8-2 s on PostgreSQL, on a loaded 2-core machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import connections
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
    #: Counts extrapolated from a sample (the day's chart, a slice with more than
    #: ``DAY_SLICE_ROWS`` attempts): see the module's docstring.
    estimated: bool = False
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

    @property
    def estimated(self) -> bool:
        return any(bucket.estimated for bucket in self.buckets)


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
    reads: dict[datetime, Read] = {start: cached[keys[start]] for start in closed if keys[start] in cached}
    missing = [start for start in starts if start not in reads]
    if missing:
        if span == "day" and connections[using].features.supports_slicing_ordering_in_compound:
            fresh = _read_sample(using, label, missing, step, now)
        else:  # SQLite: no LIMIT inside a UNION; correct there, not fast
            exact = _read(using, label, trunc, missing[0])
            fresh = {start: (groups, False) for start, groups in exact.items()}
        reads.update({start: fresh.get(start, ([], False)) for start in missing})
        cache.set_many({keys[start]: reads[start] for start in missing if start in keys}, CACHE_SECONDS)
    return Timeline(span, [_bucket(start, *reads[start]) for start in starts])


#: One outcome's numbers in one bucket: outcome, count, mean run, mean wait, longest wait.
Group = tuple[str, int, float | None, float | None, float | None]
#: A bucket as read: its groups, and whether their counts are estimated.
Read = tuple[list[Group], bool]
#: How long after its end a bucket is taken as final, and how long the cache keeps it.
SETTLED = timedelta(minutes=2)
CACHE_SECONDS = 26 * 3600
#: The day's chart: slices per hour, and the attempts read at most from each (module docstring).
DAY_SLICES = 3
DAY_SLICE_ROWS = 100


def _key(using: str, label: str, step: timedelta, start: datetime) -> str:
    # v2: a cached bucket is a Read (groups, estimated), no longer the groups alone.
    return f"dbqueue:timeline:v2:{using}:{label}:{int(step.total_seconds())}:{int(start.timestamp())}"


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


def _read_sample(
    using: str, label: str, starts: list[datetime], step: timedelta, now: datetime
) -> dict[datetime, Read]:
    """The buckets ``starts`` from at most ``DAY_SLICE_ROWS`` attempts of each of their slices:
    one statement, a ``UNION ALL`` of one index range read per slice (module docstring)."""
    width = step / DAY_SLICES
    edges = [start + width * i for start in starts for i in range(DAY_SLICES)]
    history = attempt_model()._default_manager.using(using).filter(model=label).order_by("finished_at")
    parts = [
        history.filter(finished_at__gte=edge, finished_at__lt=edge + width).values_list(
            "finished_at", "outcome", "claimed_at", "due_at"
        )[:DAY_SLICE_ROWS]
        for edge in edges
    ]
    # The ORM's statement, its rows as the driver gives them: up to 7,200 rows of three times
    # each, and Django's per-value converters were most of the page's time.
    connection = connections[using]
    sql, params = parts[0].union(*parts[1:], all=True).query.get_compiler(connection=connection).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # MySQL's driver gives naive times in the connection's zone (UTC unless DATABASES says
    # otherwise), PostgreSQL's aware ones: slice on the same kind.
    aware_rows = bool(rows) and timezone.is_aware(rows[0][0])
    zero = edges[0] if aware_rows else edges[0].astimezone(connection.timezone).replace(tzinfo=None)
    taken: list[list[tuple[Any, ...]]] = [[] for _ in edges]
    for row in rows:
        k = (row[0] - zero) // width
        if 0 <= k < len(taken):
            taken[k].append(row)
    # The current slice has lasted only until now: a full one stands for that much, no more.
    lasted = [min(width, now - edge) for edge in edges]
    return {
        start: _sampled_groups(
            [(zero + width * k, lasted[k], taken[k]) for k in range(n * DAY_SLICES, (n + 1) * DAY_SLICES)]
        )
        for n, start in enumerate(starts)
    }


def _sampled_groups(slices: list[tuple[datetime, timedelta, list[tuple[Any, ...]]]]) -> Read:
    """One bucket's groups from its slices (start, length so far, rows of finished, outcome,
    claimed, due): each row weighs 1, or, in a full slice, the slice's length over the time its
    rows covered."""
    # outcome -> [weight, weighted run, weight of the runs, weighted wait, weight of the waits]
    sums: dict[str, list[float]] = {}
    longest: dict[str, float] = {}
    estimated = False
    for edge, length, rows in slices:
        weight = 1.0
        if len(rows) >= DAY_SLICE_ROWS:
            # At least a millisecond: a burst of rows at one instant must not weigh without bound.
            # (rows - 1) / covered: the rate's unbiased estimate from the first arrivals (rows /
            # covered runs high by about one row in DAY_SLICE_ROWS).
            covered = max(max(row[0] for row in rows) - edge, timedelta(milliseconds=1))
            rate = (len(rows) - 1) / covered.total_seconds()
            weight, estimated = max(rate * length.total_seconds() / len(rows), 1.0), True
        for finished, outcome, claimed, due in rows:
            total = sums.setdefault(outcome, [0.0] * 5)
            total[0] += weight
            if claimed is not None:
                total[1] += (finished - claimed).total_seconds() * weight
                total[2] += weight
                if due is not None:
                    wait = (claimed - due).total_seconds()
                    total[3] += wait * weight
                    total[4] += weight
                    longest[outcome] = max(longest.get(outcome, wait), wait)
    groups = [
        (outcome, round(n), _ratio(run, runs), _ratio(wait, waits), longest.get(outcome))
        for outcome, (n, run, runs, wait, waits) in sums.items()
    ]
    return groups, estimated


def _ratio(total: float, weight: float) -> float | None:
    return total / weight if weight else None


def _bucket(start: datetime, groups: list[Group], estimated: bool = False) -> Bucket:
    bucket = Bucket(start, counts={outcome: n for outcome, n, *_ in groups}, estimated=estimated)
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
