"""The soak's arithmetic, kept apart from processes and databases so tests can feed it
made-up numbers: the accounting of every published item, least-squares slopes, latency
percentiles per window, and the printed table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .work import plan

FINISHED = ("succeeded", "failed")


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x (None for fewer than three points or one x)."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def rss_summary(samples: Sequence[tuple[float, int]], warmup: float) -> dict[str, Any]:
    """One process's RSS series: samples are (seconds since the soak began, KB; negative
    during the capacity phase). The slope is in KB per minute, over the soak's samples (t >= 0)
    after the process's first ``warmup`` seconds (imports, first queries and connection set-up
    happen then, and are not a leak)."""
    first = samples[0][0]
    steady = [(t / 60, kb) for t, kb in samples if t >= 0 and t - first >= warmup]
    fitted = slope(steady)
    # The second half alone: a leak keeps its slope, a warm-up that levels off loses it.
    late = slope(steady[len(steady) // 2 :])
    return {
        "from_min": round(first / 60, 2),
        "minutes": round((samples[-1][0] - first) / 60, 2),
        "samples": len(samples),
        "first_kb": samples[0][1],
        "last_kb": samples[-1][1],
        "max_kb": max(kb for _, kb in samples),
        "slope_kb_per_min": None if fitted is None else round(fitted, 2),
        "fitted_minutes": round((steady[-1][0] - steady[0][0]), 2) if len(steady) > 1 else 0,
        "late_slope_kb_per_min": None if late is None else round(late, 2),
    }


def latency_windows(points: Iterable[tuple[float, float]], width: float) -> list[dict[str, Any]]:
    """Claim latency (seconds) bucketed by claim time (seconds since the soak began) into
    windows of ``width`` seconds: count, p50, p95 and max in milliseconds."""
    buckets: dict[int, list[float]] = {}
    for at, latency in points:
        if at >= 0:
            buckets.setdefault(int(at // width), []).append(latency)
    windows = []
    for index in sorted(buckets):
        values = buckets[index]
        windows.append(
            {
                "from_min": round(index * width / 60, 2),
                "claims": len(values),
                "p50_ms": round(1000 * (percentile(values, 50) or 0), 1),
                "p95_ms": round(1000 * (percentile(values, 95) or 0), 1),
                "max_ms": round(1000 * max(values), 1),
            }
        )
    return windows


def window_slope(windows: Sequence[dict[str, Any]], key: str, width: float) -> float | None:
    """Slope of a window statistic, in its unit per minute (windows placed at their middle)."""
    fitted = slope([(w["from_min"] + width / 120, w[key]) for w in windows])
    return None if fitted is None else round(fitted, 3)


def account(
    expected: Iterable[int],
    seed: int,
    rows: dict[tuple[bool, int], tuple[str, str]],
    runs: dict[tuple[bool, int], list[tuple[int, int]]],
    killed: set[int],
) -> dict[str, int]:
    """Every published item against what the database holds.

    ``rows``: (is_message, n) -> (queue_state, queue_last_error) of the rows still there (the
    purge deleted succeeded ones); ``runs``: (is_message, n) -> [(attempt, pid)] from the
    ledger; ``killed``: pids of worker processes the soak SIGKILLed."""
    c: Counter = Counter()
    for n in expected:
        item = plan(n, seed)
        key = (item.is_message, n)
        kind = "message" if item.is_message else "task"
        c[f"{kind}s published"] += 1
        state, error = rows.get(key, ("purged", ""))
        ran = runs.get(key, [])
        if state not in (*FINISHED, "purged"):
            c["lost (not finished)"] += 1
            continue
        # purgequeue deletes succeeded (and cancelled) rows only; nothing here is cancelled.
        final = "succeeded" if state == "purged" else state
        c[f"{kind}s {final}"] += 1
        c[f"{kind}s purged"] += state == "purged"
        if final != item.final_state:
            c["wrong final state"] += 1
        if final == "failed" and not error:
            c["failed without a reason"] += 1
        if item.is_message:
            if final == "succeeded" and not ran:
                c["messages succeeded that never ran"] += 1
            last = max((a for a, _ in ran), default=0)
            for attempt, pid in ran:
                if attempt == last:
                    continue
                if item.fail == "flaky" and attempt == 1:
                    c["message runs that failed as planned"] += 1
                elif pid in killed:
                    c["message re-runs after a SIGKILL (at-least-once)"] += 1
                else:
                    c["message re-runs not explained by a kill"] += 1
        else:
            committed = len(ran)
            if final == "succeeded" and committed != 1:
                wrong = "tasks whose effects committed more than once"
                c[wrong if committed else "tasks succeeded without their effect"] += 1
            if final == "failed" and committed:
                c["tasks failed with a committed effect"] += 1
    return dict(c)


MUST_BE_ZERO = (
    "lost (not finished)",
    "wrong final state",
    "failed without a reason",
    "messages succeeded that never ran",
    "message re-runs not explained by a kill",
    "tasks succeeded without their effect",
    "tasks whose effects committed more than once",
    "tasks failed with a committed effect",
    "two runs of one attempt (ledger IntegrityError)",
)
