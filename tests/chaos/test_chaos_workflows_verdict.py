"""The workflow chaos run's verdict catches what it is there to catch: a step whose effect
committed twice in atomic mode, a step run after its checkpoint committed, a lease-mode re-run
no fault explains, a missing step, a workflow not finished (no database: plain data in)."""

from __future__ import annotations

from tests.chaos.workflows.verdict import MUST_BE_ZERO, Faults, Mode, counters, expected_results, problems


def finished(name: str, ledger: list[tuple[int, int, int, bool]], rows: int = 2) -> Mode:
    return Mode(
        name,
        steps=3,
        rows={pk: ("succeeded", "") for pk in range(1, rows + 1)},
        ledger=ledger,
        checkpoints={pk: expected_results(3) for pk in range(1, rows + 1)},
    )


def each_step_once(pid: int = 10) -> list[tuple[int, int, int, bool]]:
    return [(pk, step, pid, False) for pk in (1, 2) for step in (1, 2, 3)]


def zeros(found: dict[str, int]) -> dict[str, int]:
    return {name: value for name, value in found.items() if name in MUST_BE_ZERO and value}


def test_a_clean_run_has_only_zeros() -> None:
    assert zeros(counters(finished("atomic", each_step_once()), Faults())) == {}
    assert zeros(counters(finished("lease", each_step_once()), Faults())) == {}


def test_an_atomic_step_committed_twice_is_caught() -> None:
    found = counters(finished("atomic", [*each_step_once(), (2, 3, 11, False)]), Faults(killed_pids={11}))
    assert zeros(found) == {"atomic: steps whose effect committed more than once": 1}


def test_a_step_run_after_its_checkpoint_is_caught_in_both_modes() -> None:
    for name in ("atomic", "lease"):
        ledger = [*each_step_once(), (1, 2, 12, True)]
        found = zeros(counters(finished(name, ledger), Faults(killed_pids={10})))
        assert found[f"{name}: steps run after their checkpoint committed"] == 1


def test_lease_reruns_are_explained_by_the_first_runs_fault_or_caught() -> None:
    ledger = [(1, 2, 10, False), *each_step_once(pid=20)]  # pid 10 ran step 2 of row 1 first
    killed = counters(finished("lease", ledger), Faults(killed_pids={10}))
    assert killed["lease: cut-short runs whose worker was SIGKILLed"] == 1 and zeros(killed) == {}
    lost = counters(finished("lease", ledger), Faults(disconnected_pids={10}))
    assert lost["lease: cut-short runs whose worker lost its database session"] == 1 and zeros(lost) == {}
    unexplained = counters(finished("lease", ledger), Faults(killed_pids={20}))
    assert zeros(unexplained) == {"lease: cut-short runs without a kill or a lost session": 1}


def test_missing_steps_unfinished_rows_and_wrong_checkpoints_are_caught() -> None:
    mode = finished("atomic", each_step_once()[:-1], rows=3)
    mode.rows[3] = ("ready", "")
    mode.checkpoints[2] = {"step-1": 1}
    found = zeros(counters(mode, Faults()))
    assert found == {
        "atomic: workflows not finished": 1,
        "atomic: finished workflows with wrong checkpoints": 1,
        "atomic: steps whose effect is missing": 4,  # row 2's step 3, row 3's three
    }


def test_a_run_without_its_faults_fails() -> None:
    results = {
        "counters": counters(finished("atomic", each_step_once()), Faults()),
        "events": {"SIGKILL worker process": 3},
        "settled": True,
    }
    assert problems(results) == ["the database was not restarted"]
