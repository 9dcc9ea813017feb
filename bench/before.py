# ruff: noqa: RUF001, RUF003 - it reads typeset Markdown (en dashes, multiplication signs)
"""The "before" figures: the previous core's, read from the BENCHMARKS.md its last full
`make bench` wrote (commit 43bbecd, this machine, 2026-11-23), so that BENCHMARKS.md can show
this core's floors next to the old one's.

That file keeps every drain's rate per run ("Every drain (jobs/s per run)"), so the drain
floors are recomputed from it with the same arithmetic as this run's (bench/floors.py); the
enqueue, claim-cost and pickup figures it only has as the run's medians, which are taken as
they stand. The old harness did not time ``save()`` against a model without QueueMixin, so
that floor has no "before".
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

COMMIT = "43bbecd"
#: The old report's row labels (bench/report.py at 43bbecd) → (system, variant).
OLD_LABELS = {
    "raw SQL, claim 1 (SKIP LOCKED), ack each": ("raw", "claim1"),
    "raw SQL, claim 100, ack each": ("raw", "claim100"),
    "raw SQL, claim 100, atomic mode's statements per job": ("raw", "atomic"),
    "raw SQL, claim 100, one ack UPDATE per batch (**the limit**)": ("raw", "batch"),
    "raw SQL, claim 500, one ack UPDATE per batch": ("raw", "batch500"),
    "**django_dbqueue**, lease mode, batched outcomes": ("dbqueue", "lease"),
    "**django_dbqueue**, lease mode, attempt history off": ("dbqueue", "lease-nohist"),
    "**django_dbqueue**, atomic mode (1 job per transaction)": ("dbqueue", "atomic"),
    "**django_dbqueue**, atomic mode, attempt history off": ("dbqueue", "atomic-nohist"),
    "**django_dbqueue**, atomic mode, 100 jobs per transaction": ("dbqueue", "grouped"),
    "dj_queue": ("djqueue", "default"),
    "django-tasks-db": ("tasksdb", "default"),
    "django-q2 (ORM broker)": ("q2", "default"),
}


def _number(cell: str) -> float | None:
    cell = cell.strip().replace(",", "").rstrip("×").strip()
    try:
        return float(cell)
    except ValueError:
        return None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse(text: str) -> dict[str, Any]:
    """A results-like dict (what bench/floors.py reads) from an old BENCHMARKS.md's text."""
    runs: list[dict[str, Any]] = []
    section = ""
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.lstrip("#").strip()
            continue
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = _cells(line)
        if section.startswith("Every drain") and cells[0] in OLD_LABELS and cells[1].isdigit():
            system, variant = OLD_LABELS[cells[0]]
            for index, cell in enumerate(cells[2:]):
                while len(runs) <= index:
                    runs.append({"drain": [], "enqueue": [], "pickup": []})
                runs[index]["drain"].append(
                    {
                        "system": system,
                        "variant": variant,
                        "workers": int(cells[1]),
                        "rate": _number(cell),
                        "exactly_once": "ok",  # the old report left failed drains out ("–")
                    }
                )
    if not runs:
        return {}
    results: dict[str, Any] = {"runs": runs}
    ours: dict[str, Any] = {"system": "dbqueue"}
    for kind, pattern in (
        ("one", r"enqueue one-by-one: .*?\| ([\d.]+)×"),
        ("bulk", r"bulk enqueue: .*?\| ([\d.]+)×"),
    ):
        found = re.search(pattern, text)
        ours[f"{kind}_ratio"] = float(found.group(1)) if found else None
    runs[0]["enqueue"].append(ours)
    pick = re.search(
        r"\| \*\*django_dbqueue\*\*, lease mode, batched outcomes \|.*?\| (\d+) / (\d+) ms \|", text
    )
    if pick:
        runs[0]["pickup"].append({"system": "dbqueue", "p50_ms": float(pick[1]), "p95_ms": float(pick[2])})
    claim = re.search(r"Claim time at ([\d,]+) finished rows / empty table: \*\*([\d.]+)×\*\*", text)
    if claim:
        finished = int(claim[1].replace(",", ""))
        results["claim_cost"] = {
            "levels": [{"finished": 0}, {"finished": finished, "ratio_to_first": float(claim[2])}]
        }
    return results


def load(root: Path, commit: str = COMMIT) -> dict[str, Any]:
    """The previous core's results from its BENCHMARKS.md in git; {} where git cannot show it."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:BENCHMARKS.md"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse(done.stdout) if done.returncode == 0 else {}
