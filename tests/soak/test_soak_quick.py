"""The soak harness end to end, 1 minute of soak (about 2 minutes in all, so not in ``make
test``): ``make soak-quick`` sets ``DBQUEUE_SOAK=1`` and runs it on MariaDB. It fails if an item
is lost or doubled, or if the run did not do what the soak promises (kills, purges, samples)."""

from __future__ import annotations

import os

import pytest

from tests.chaos.harness import run_to_json
from tests.soak.analysis import MUST_BE_ZERO
from tests.soak.report import problems, table

pytestmark = [
    pytest.mark.slow,
    pytest.mark.processes,
    pytest.mark.skipif(
        not os.environ.get("DBQUEUE_SOAK") or not os.environ.get("DATABASE_URL", "").startswith("mysql"),
        reason="about 2 minutes on MariaDB: make soak-quick (DBQUEUE_SOAK=1, a mysql:// DATABASE_URL)",
    ),
]


def test_a_one_minute_soak_accounts_for_every_item(tmp_path) -> None:
    out = tmp_path / "soak.json"
    proc, results = run_to_json(["tests.soak", "--minutes", "1", "--capacity-rows", "1500"], out, timeout=600)
    report = table(results)
    print(report)
    counters = results["counters"]
    assert not problems(results), report
    assert all(not counters.get(name) for name in MUST_BE_ZERO), report
    assert proc.returncode == 0, report
    # What the soak promises happened: kills replaced by the supervisor, purges that deleted
    # finished rows and history, RSS series for every worker, latencies every minute.
    assert len(results["kills"]) >= 4, report
    assert len(results["purges"]) >= 2 and sum(
        p["deleted"].get("QueueAttempt", 0) for p in results["purges"]
    ), report
    assert counters["messages purged"] > 0 and counters["tasks purged"] > 0, report
    workers = [s for s in results["rss_series"] if s["role"] == "worker"]
    assert len(workers) >= 4 + len(results["kills"]) - 1, report
    assert any(s["fate"] == "spared" and s["slope_kb_per_min"] is not None for s in workers), report
    assert results["latency"]["per_minute"] and results["latency"]["per_minute"][0]["claims"] > 100, report
    published = counters["messages published"] + counters["tasks published"]
    assert published == counters["items the publisher meant to publish"] > 1500, report
