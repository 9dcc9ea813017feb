"""The fault table as Markdown (what RELIABILITY.md shows)."""

from __future__ import annotations

from typing import Any

COLUMNS = (
    "Scenario",
    "Server",
    "Good rows",
    "Lost",
    "Doubled (atomic)",
    "Stuck",
    "Good failed",
    "Lease re-runs",
    "Max attempts (good)",
    "Recovery s",
    "Poison row: lease / atomic",
    "Workers replaced / tracebacks",
    "Notes",
    "Result",
)


def _poison(result: dict[str, Any]) -> str:
    poison = result.get("poison") or {}
    if not poison:
        return "-"
    return " / ".join(poison.get(kind, "-") for kind in ("HostileJob", "HostileAtomicJob")).replace(
        "|", "\\|"
    )


def notes(result: dict[str, Any]) -> str:
    log = result.get("log", {})
    said = [f"drain {result['drain']} s"] if result.get("drain") is not None else []
    if result.get("read_only_for"):
        lines = log.get("read_only_lines", 0)
        said.append(f"read-only {result['read_only_for']:g} s, {lines} read-only log lines")
    if result["scenario"]["concurrency"] > 4:
        started, peak = log.get("workers_started", 0), result.get("peak_sessions")
        said.append(f"{started} workers started, peak {peak} sessions")
        said.append(f"{log.get('too_many_connections', 0)} 'Too many connections'")
        said.append("start-up warning" if log.get("warning") else "no start-up warning")
    return ", ".join(said)


def row(result: dict[str, Any]) -> list[str]:
    scenario = result["scenario"]
    first = [f"{scenario['key']}: {scenario['title']}", scenario["server"]]
    if result.get("not_applicable"):
        return [*first, *["n/a"] * 10, str(result["not_applicable"])[:200].replace("|", "\\|"), "n/a"]
    if result.get("error"):
        return [*first, *["?"] * 11, "ERROR (see log)"]
    log = result.get("log", {})
    return [
        *first,
        str(result["good"]),
        str(result["lost"]),
        str(result["doubled"]),
        str(result["stuck"]),
        str(result["good_failed"]),
        f"{result['reruns']} (max {result['most_runs']} runs)",
        str(result["most_attempts"]),
        "not recovered" if result["recovery"] is None else f"{result['recovery']:.1f}",
        _poison(result),
        f"{log.get('replaced', 0)} / {log.get('tracebacks', 0)}",
        notes(result),
        "pass" if result["passed"] else "**FAIL**",
    ]


def table(header: dict[str, Any], results: list[dict[str, Any]]) -> str:
    lines = [
        f"Run {header['date']}, commit {header['commit']}, load {header['load_before']} before and "
        f"{header.get('load_after', '?')} after; "
        f"MariaDB max_connections={header['mariadb_max_connections']}.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(row(result)) + " |" for result in results]
    return "\n".join(lines)
