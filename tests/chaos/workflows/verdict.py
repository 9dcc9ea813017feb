"""The workflow chaos run's counters, from what the tables hold at the end: plain data in,
counters out, so the test of the verdict feeds it a doubled step and sees it caught."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any


def expected_results(steps: int) -> dict[str, int]:
    """Each step's checkpointed result: the running total of the step numbers, handed on
    from step to step (tests/testapp ``WorkflowBase``)."""
    return {f"step-{n}": n * (n + 1) // 2 for n in range(1, steps + 1)}


@dataclass
class Mode:
    """What one model's tables hold after the run."""

    name: str  # "atomic" or "lease"
    steps: int
    #: pk -> (queue_state, queue_last_error)
    rows: dict[int, tuple[str, str]]
    #: one (job_id, step, pid, after_checkpoint) per run of a step's body
    ledger: list[tuple[int, int, int, bool]]
    #: pk -> {checkpoint name: result}
    checkpoints: dict[int, dict[str, Any]]


@dataclass
class Faults:
    killed_pids: set[int] = field(default_factory=set)
    #: worker pids whose log shows their database session lost (the restart)
    disconnected_pids: set[int] = field(default_factory=set)


def counters(mode: Mode, faults: Faults) -> dict[str, int]:
    runs: dict[tuple[int, int], list[tuple[int, bool]]] = defaultdict(list)
    for job, step, pid, after in mode.ledger:
        runs[job, step].append((pid, after))
    wanted = expected_results(mode.steps)
    name = mode.name
    out = {
        f"{name}: rows": len(mode.rows),
        f"{name}: workflows finished (SUCCEEDED)": sum(1 for s, _ in mode.rows.values() if s == "succeeded"),
        f"{name}: workflows not finished": sum(1 for s, _ in mode.rows.values() if s != "succeeded"),
        f"{name}: finished workflows with wrong checkpoints": sum(
            1 for pk, (s, _) in mode.rows.items() if s == "succeeded" and mode.checkpoints.get(pk) != wanted
        ),
        f"{name}: step bodies run": len(mode.ledger),
        f"{name}: steps whose effect is missing": sum(
            1 for pk in mode.rows for step in range(1, mode.steps + 1) if not runs.get((pk, step))
        ),
        f"{name}: steps run after their checkpoint committed": sum(1 for *_, after in mode.ledger if after),
    }
    if name == "atomic":
        out["atomic: steps whose effect committed more than once"] = sum(
            1 for r in runs.values() if len(r) > 1
        )
        return out
    reruns = [r for r in runs.values() if len(r) > 1]
    cut_short = Counter(_cause(pid, faults) for r in reruns for pid, _ in r[:-1])
    out["lease: steps run more than once (a run cut short before the checkpoint)"] = len(reruns)
    out["lease: cut-short runs whose worker was SIGKILLed"] = cut_short["killed"]
    out["lease: cut-short runs whose worker lost its database session"] = cut_short["disconnected"]
    out["lease: cut-short runs without a kill or a lost session"] = cut_short["unexplained"]
    return out


def unfinished_rows(mode: Mode) -> list[str]:
    """Each workflow row that did not end SUCCEEDED, with its state, its checkpointed steps and
    its last error: what a failed run's table shows, so the failure explains itself."""
    return [
        f"{mode.name} row {pk}: {state}, checkpoints {sorted(mode.checkpoints.get(pk, {}))}, "
        f"last error {error!r}"
        for pk, (state, error) in sorted(mode.rows.items())
        if state != "succeeded"
    ]


def _cause(pid: int, faults: Faults) -> str:
    if pid in faults.killed_pids:
        return "killed"
    if pid in faults.disconnected_pids:
        return "disconnected"
    return "unexplained"


MUST_BE_ZERO = (
    "atomic: workflows not finished",
    "lease: workflows not finished",
    "atomic: finished workflows with wrong checkpoints",
    "lease: finished workflows with wrong checkpoints",
    "atomic: steps whose effect is missing",
    "lease: steps whose effect is missing",
    "atomic: steps run after their checkpoint committed",
    "lease: steps run after their checkpoint committed",
    "atomic: steps whose effect committed more than once",
    "lease: cut-short runs without a kill or a lost session",
)


def problems(results: dict[str, Any]) -> list[str]:
    found = [
        f"{name} = {results['counters'][name]}" for name in MUST_BE_ZERO if results["counters"].get(name)
    ]
    events = results["events"]
    if not events.get("SIGKILL worker process"):
        found.append("no worker process was killed")
    if not events.get("database restart"):
        found.append("the database was not restarted")
    if not results.get("settled"):
        found.append("the workflows did not all finish in time")
    return found


def table(results: dict[str, Any]) -> str:
    lines = ["", f"Workflow chaos run results ({results['server']})", "=" * 78]

    def row(label: str, value: Any) -> None:
        lines.append(f"{label:<66} {value!s:>11}")

    lines.append("Faults injected")
    for label, value in sorted(results["events"].items()):
        row(f"  {label}", value)
    lines.append("Counters")
    for label, value in results["counters"].items():
        mark = "  " if label not in MUST_BE_ZERO else ("! " if value else "0=")
        row(f"{mark}{label}", value)
    for line in results.get("unfinished", []):
        lines.append(f"Not finished: {line}")
    lines.append(f"Recovery after the restart: {results['recoveries']}")
    lines.append(f"Timings (s): {results['timings']}")
    found = problems(results)
    lines.append("=" * 78)
    lines.append(
        "PASS: every step once (atomic), every workflow finished"
        if not found
        else "FAIL: " + "; ".join(found)
    )
    return "\n".join(lines)
