"""The docs keep their promises (issue #24): every code sample of the README and the tutorial runs
as pasted into a fresh Django project, and no page links a file that is not in the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_samples import samples

ROOT = Path(__file__).resolve().parent.parent
#: The pages whose every python/sh block is run, in order, by tests/docs_samples.py.
RUN_AS_PASTED = ["README.md", "docs/tutorial.md"]
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.mark.processes
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "sqlite").startswith("sqlite"),
    reason="the samples build their own SQLite project: one run (the SQLite one) is enough",
)
@pytest.mark.parametrize("page", RUN_AS_PASTED)
def test_every_sample_runs_as_pasted(page: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs_samples.py"), str(ROOT / page), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert "all samples ran" in done.stdout


@pytest.mark.parametrize("page", RUN_AS_PASTED)
def test_every_python_block_is_run(page: str) -> None:
    """An unmarked block, or a skipped python block, is refused (samples() raises)."""
    found = samples((ROOT / page).read_text())
    assert any(s.how == "shell" for s in found) and any(s.how == "sh" for s in found)


def test_unmarked_and_skipped_python_blocks_are_refused() -> None:
    with pytest.raises(ValueError, match="without a <!-- sample"):
        samples("text\n\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="only sh blocks"):
        samples("<!-- sample: skip: no -->\n```python\nprint(1)\n```\n")


def _pages() -> list[Path]:
    return sorted([*ROOT.glob("*.md"), *(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)])


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_in_the_repository(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # links in code are code
    missing = []
    for link in LINK.finditer(text):
        target = link.group("target").split("#", 1)[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        if not (page.parent / target).exists():
            missing.append(target)
    assert not missing, f"{page.name} links files that do not exist: {missing}"
