"""The quick chaos run (about 40 s) as a test: it fails if any counter is wrong.

It owns a private MariaDB server (see ``tests/chaos/mariadb.py``), so it does not depend on
the database under test; it runs once, in the MariaDB pass of ``make test``. The long run is
``make chaos``.
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.harness import MUST_BE_ZERO, ROOT, problems, run_to_json, table
from tests.chaos.mariadb import PrivateMariaDB

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("mysql"),
        reason="owns a private MariaDB server: runs once, in the MariaDB pass (make test-mariadb)",
    ),
]


def test_quick_chaos_run_loses_nothing_and_doubles_nothing(tmp_path) -> None:
    if not PrivateMariaDB(ROOT / "unused").available:
        pytest.skip("mariadbd / mariadb-install-db not installed (apt-get install mariadb-server)")
    # The run makes (and, when it passes, removes) its own private folder for the server.
    out = tmp_path / "results.json"
    proc, results = run_to_json(["tests.chaos"], out, timeout=240)
    report = table(results)
    print(report)
    counters = results["counters"]
    assert not problems(results), report
    assert all(counters[name] == 0 for name in MUST_BE_ZERO), report
    assert proc.returncode == 0, report
    # The faults really happened, and were survived.
    events = results["events"]
    assert events["SIGKILL worker process"] >= 5 and events["SIGKILL whole runqueue"] >= 1, report
    assert events["database restart (SIGTERM)"] == 1 and events["KILL CONNECTION"] >= 1, report
    assert results["recoveries"][0]["all_runqueues_back_s"] is not None, report
    assert (
        counters["lease: rows expected"]
        == counters["lease: succeeded"] + counters["lease: poison rows FAILED with a reason"]
    ), report
    assert counters["outcomes recorded by clock-skewed workers"] > 0, report
    assert counters["atomic: attempts run one per transaction"] > 0, report
    assert counters["atomic: attempts run in optimistic groups"] > 0, report
