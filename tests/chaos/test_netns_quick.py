"""The quick many-hosts run (about a minute) as a test: a database and three ``runqueue``
hosts in network namespaces of their own; host h1 is cut off mid-job and healed, once in lease
mode and once in atomic mode (``tests/chaos/netns``). It fails on any wrong counter.

It needs root (``ip netns add``) and owns a private MariaDB server, so it runs once, in the
MariaDB pass of ``make test``. The full run, with the slow link, is ``make netns``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.chaos.harness import ROOT
from tests.chaos.mariadb import PrivateMariaDB
from tests.chaos.netns.__main__ import problems, table
from tests.chaos.netns.network import missing

pytestmark = [
    pytest.mark.processes,
    pytest.mark.chaos,
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("mysql"),
        reason="owns a private MariaDB server: runs once, in the MariaDB pass (make test-mariadb)",
    ),
]


def test_a_partitioned_host_loses_its_rows_and_writes_nothing_late(tmp_path) -> None:
    reason = missing()
    if reason:
        pytest.skip(f"cannot build the network: {reason}")
    if not PrivateMariaDB(ROOT / "unused").available:
        pytest.skip("mariadbd / mariadb-install-db not installed (apt-get install mariadb-server)")
    out = tmp_path / "results.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.netns", "--json", str(out)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.terminate()  # its network is removed on SIGTERM too
        stdout, stderr = proc.communicate(timeout=60)
    # Whatever the outcome, the run removed its namespaces (named after its pid).
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"dbqn{proc.pid}-" not in left, left
    assert out.exists(), stdout[-3000:] + stderr[-6000:]
    results = json.loads(out.read_text())
    report = table(results)
    print(report)
    assert not problems(results), report
    assert proc.returncode == 0, report
    lease, atomic = results["partitions"]
    for part in (lease, atomic):
        # The cut really happened mid-job, and the others took over h1's rows.
        assert part["rows h1 held when cut"] > 0, report
        assert part["h1 rows finished by the others after (s)"] is not None, report
        assert part["attempts recorded lost (rescued after an expired lease)"] > 0, report
        # h1 came back and tried to write: every late outcome was rejected.
        assert part["h1 late outcomes rejected (log lines)"] > 0, report
        assert part["h1 outcomes written after the cut for rows it held"] == 0, report
        assert part["rows succeeded"] == part["rows"], report
    # Atomic mode: the cut hit a running handler (its row locked by h1's open transaction); the
    # server ended that session after the idle bound, so the row came back before the heal.
    assert atomic["rows h1 held locked (handler running) when cut"] > 0, report
    assert atomic["h1 rows stuck RUNNING until heal"] == 0, report
    assert atomic["rows whose handler effect committed more than once"] == 0, report
