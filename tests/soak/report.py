"""The soak's figures from its raw samples, what must hold, and the printed table."""

from __future__ import annotations

from typing import Any

from .analysis import MUST_BE_ZERO, latency_windows, rss_summary, window_slope

WINDOW = 300.0  # seconds: the latency windows whose p50/p95 and slope are reported


def summarise(
    results: dict[str, Any], latencies: list[tuple[float, float]], warmup: float, killed: set[int]
) -> None:
    """Add the RSS series' slopes and the latency windows to ``results``."""
    series = []
    for pid, data in results["rss"].items():
        summary = rss_summary(data["samples"], warmup)
        fate = "SIGKILLed" if pid in killed else "spared" if pid in results["spared"] else "ran to the end"
        series.append({"pid": pid, "role": data["role"], "fate": fate, **summary})
    results["rss_series"] = sorted(series, key=lambda s: (s["role"] != "supervisor", s["from_min"], s["pid"]))
    per_minute = latency_windows(latencies, 60.0)
    per_window = latency_windows(latencies, WINDOW)
    results["latency"] = {
        "per_minute": per_minute,
        "per_5_minutes": per_window,
        "p50_slope_ms_per_min": window_slope(per_window, "p50_ms", WINDOW),
        "p95_slope_ms_per_min": window_slope(per_window, "p95_ms", WINDOW),
        "p95_slope_per_minute_windows_ms_per_min": window_slope(per_minute, "p95_ms", 60.0),
    }


def long_series(results: dict[str, Any], minutes: float) -> list[dict[str, Any]]:
    """Series whose fitted part spans at least ``minutes``: the ones a slope means something for."""
    return [
        s
        for s in results["rss_series"]
        if s["slope_kb_per_min"] is not None and s["fitted_minutes"] >= minutes
    ]


def problems(results: dict[str, Any]) -> list[str]:
    counters = results.get("counters", {})
    found = [f"{name} = {counters.get(name)}" for name in MUST_BE_ZERO if counters.get(name)]
    intended = counters.get("items the publisher meant to publish")
    if counters.get("items in the publisher's ledger (ChaosBatch)") != intended:
        found.append("the publisher's ledger does not hold every item it meant to publish")
    if results.get("publisher", {}).get("published") != intended - results["capacity"]["items"]:
        found.append(f"the publisher reported {results.get('publisher')}")
    for name in ("ledger items missing from the plan (must be 0)", "rows not in the publisher's ledger"):
        if counters.get(name):
            found.append(f"{name} = {counters[name]}")
    if counters.get("items published twice (rows)"):
        found.append(f"items published twice = {counters['items published twice (rows)']}")
    if not results.get("settled"):
        found.append("the queue did not settle (items still READY or RUNNING)")
    if results.get("sigterm_exit") != 0:
        found.append(f"runqueue exited with {results.get('sigterm_exit')} after SIGTERM")
    if any(p["exit"] != 0 for p in results.get("purges", [])):
        found.append("a purgequeue run failed")
    return found


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def window_line(w: dict[str, Any]) -> str:
    return f"  {w['from_min']:>8} {w['claims']:>8} {w['p50_ms']:>8} {w['p95_ms']:>8} {w['max_ms']:>9}"


def table(results: dict[str, Any]) -> str:
    lines = ["", "Soak run results", "=" * 86]
    cap, pub = results["capacity"], results.get("publisher", {})
    lines.append(
        f"Capacity of {results['config']['concurrency']} workers: {cap['items_per_s']} items/s "
        f"({cap['attempts_per_s']} attempts/s; {cap['items']} items drained in {cap['drain_s']} s)"
    )
    lines.append(
        f"Soak: {results.get('soak_s')} s at {pub.get('rate_per_s')} items/s "
        f"({results['config']['load']:.0%} of capacity), {pub.get('published')} items published, "
        f"publisher at most {pub.get('most_behind_s')} s behind; settled in {results.get('settle_s')} s"
    )
    lines.append(
        f"Faults: {len(results['kills'])} worker SIGKILLs, {len(results['purges'])} purgequeue runs; "
        f"load {results['load_before']} -> {results['load_after']}"
    )
    lines.append("Accounting (0= must be zero)")
    for name, value in results.get("counters", {}).items():
        mark = "  " if name not in MUST_BE_ZERO else ("! " if value else "0=")
        lines.append(f"{mark}{name:<70} {value!s:>11}")
    lines.append(f"Attempt outcomes seen by the sampler: {results.get('outcomes')}")
    lines.append("RSS per process (KB; slope over the soak after each process's warm-up)")
    lines.append(
        f"  {'pid':>8} {'role':<10} {'fate':<15} {'from min':>8} {'minutes':>7} {'first':>8} "
        f"{'last':>8} {'max':>8} {'KB/min':>8} {'2nd half':>8}"
    )
    for s in results["rss_series"]:
        lines.append(
            f"  {s['pid']:>8} {s['role']:<10} {s['fate']:<15} {s['from_min']:>8} {s['minutes']:>7} "
            f"{s['first_kb']:>8} {s['last_kb']:>8} {s['max_kb']:>8} {_num(s['slope_kb_per_min']):>8} "
            f"{_num(s.get('late_slope_kb_per_min')):>8}"
        )
    killed = [s for s in results["rss_series"] if s["fate"] == "SIGKILLed"]
    if killed:
        deaths = sorted(s["last_kb"] for s in killed)
        lines.append(
            f"  {len(killed)} SIGKILLed workers: RSS at their last sample {deaths[0]}..{deaths[-1]} KB "
            f"(median {deaths[len(deaths) // 2]}), born from minute {killed[0]['from_min']} "
            f"to {killed[-1]['from_min']}"
        )
    latency = results["latency"]
    lines.append("Claim latency (due -> claimed, database clock) per 5 minutes")
    lines.append(f"  {'from min':>8} {'claims':>8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>9}")
    lines.extend(window_line(w) for w in latency["per_5_minutes"])
    lines.append("  per minute:")
    lines.extend(window_line(w) for w in latency["per_minute"])
    lines.append(
        f"  slope of p50: {latency['p50_slope_ms_per_min']} ms/min, "
        f"of p95: {latency['p95_slope_ms_per_min']} ms/min"
    )
    lines.append("Backlog (due READY / RUNNING / rows in the message and task tables), every ~minute")
    step = max(1, round(60 / results["config"]["sample_every"]))
    for b in results["backlog"][::step]:
        load = b.get("load1", "")
        lines.append(
            f"  {b['at_s']:>7} s  {b['ready_due']:>6} {b['running']:>5} {b['table_rows']:>8}  load {load}"
        )
    lines.append("Purges (s after start: seconds taken, rows deleted)")
    for p in results["purges"]:
        lines.append(f"  {p['at_s']:>7} s: {p['seconds']} s, {p['deleted']}")
    found = problems(results)
    lines.append("=" * 86)
    lines.append("PASS: nothing lost, nothing doubled" if not found else "FAIL: " + "; ".join(found))
    return "\n".join(lines)
