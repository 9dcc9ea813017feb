"""The README's first command: the example shop runs end to end (SQLite, temporary file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "example_project"


@pytest.mark.processes
def test_example_shop_runs_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'shop.sqlite3'}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    for args in (["migrate", "-v0"], ["shopdemo", "--orders", "1000"]):
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=EXAMPLE,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # One order in a thousand goes to the demo's blocked customer and must fail, reason kept.
    assert "Succeeded  999" in out and "Failed     1" in out
    assert "keeps its reason" in out and "cannot ship to country 'XX'" in out
