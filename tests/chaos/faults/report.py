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
    "Worker exits",
    "Result",
)


def _poison(result: dict[str, Any]) -> str:
    poison = result.get("poison") or {}
    if not poison:
        return "-"
    return " / ".join(poison.get(kind, "-") for kind in ("HostileJob", "HostileAtomicJob")).replace(
        "|", "\\|"
    )


def row(result: dict[str, Any]) -> list[str]:
    scenario = result["scenario"]
    first = [f"{scenario['key']}: {scenario['title']}", scenario["server"]]
    if result.get("not_applicable"):
        return [*first, *["n/a"] * 9, str(result["not_applicable"])[:200].replace("|", "\\|"), "n/a"]
    if result.get("error"):
        return [*first, *["?"] * 10, "ERROR (see log)"]
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
        f"{log.get('replaced', 0)} replaced",
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
