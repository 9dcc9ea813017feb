"""The workflow chaos run at 60 rows a mode (about 35 s) as a test: it fails if any counter is
wrong (tests/chaos/workflows). It owns a private MariaDB server, so it runs once, in the MariaDB
pass of ``make test``; the full run (2,000 rows a mode, MariaDB and PostgreSQL) is
``make chaos-workflows``."""

from __future__ import annotations

import os

import pytest

from tests.chaos.harness import ROOT, run_to_json
from tests.chaos.mariadb import PrivateMariaDB
from tests.chaos.workflows.verdict import MUST_BE_ZERO, problems, table

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("mysql"),
        reason="owns a private MariaDB server: runs once, in the MariaDB pass (make test-mariadb)",
    ),
]


def test_quick_workflow_chaos_run_runs_each_step_once_and_finishes_every_workflow(tmp_path) -> None:
    if not PrivateMariaDB(ROOT / "unused").available:
        pytest.skip("mariadbd / mariadb-install-db not installed (apt-get install mariadb-server)")
    out = tmp_path / "results.json"
    proc, results = run_to_json(["tests.chaos.workflows", "--quick"], out, timeout=300)
    report = table(results)
    print(report)
    counters = results["counters"]
    assert not problems(results), report
    assert all(counters[name] == 0 for name in MUST_BE_ZERO), report
    assert proc.returncode == 0, report
    # The faults happened, and every step ran: 60 workflows of 5 steps a mode.
    assert results["events"]["SIGKILL worker process"] >= 3, report
    assert results["events"]["database restart"] == 1, report
    assert counters["atomic: step bodies run"] == 300, report
    assert counters["lease: step bodies run"] >= 300, report
