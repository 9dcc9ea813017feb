"""The chaos run keeps its files to itself (issue 21, item 10): a private temporary folder per
run, never wiped when given by hand, and results written outside the tracked tree."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.chaos.harness import QUICK, Harness, private_workdir

ROOT = Path(__file__).resolve().parent.parent.parent


def git(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def test_two_runs_get_two_private_folders() -> None:
    first, second = Harness(QUICK), Harness(QUICK)
    try:
        assert first.base != second.base
        for harness in (first, second):
            base = harness.base
            assert base.is_dir() and not any(base.iterdir())
            assert base.parent == Path(tempfile.gettempdir()) and base.name.startswith("dbqueue-chaos-")
            mode = stat.S_IMODE(base.stat().st_mode)
            assert not mode & (stat.S_IRGRP | stat.S_IROTH | stat.S_IWGRP | stat.S_IWOTH), oct(mode)
            assert harness.db.base == base / "mariadb" and harness.logdir == base / "logs"
    finally:
        for harness in (first, second):
            if harness.base.name.startswith("dbqueue-chaos-"):  # never a shared, fixed folder
                shutil.rmtree(harness.base, ignore_errors=True)


def test_a_folder_given_by_hand_is_never_wiped(tmp_path) -> None:
    (tmp_path / "keep.txt").write_text("another run's logs")
    with pytest.raises(RuntimeError, match="is not empty"):
        private_workdir(str(tmp_path))
    assert (tmp_path / "keep.txt").read_text() == "another run's logs"
    fresh = tmp_path / "new" / "run"
    assert private_workdir(str(fresh)) == fresh and fresh.is_dir()


def test_no_chaos_results_are_tracked() -> None:
    tracked = git("ls-files", "tests/chaos").stdout.split()
    assert tracked and not [name for name in tracked if name.endswith(".json")]


def test_make_chaos_writes_its_results_to_an_ignored_path_one_file_per_run() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^chaos:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "no chaos target"
    command = recipe.group(1)
    json_arg = re.search(r"--json (\S+)", command)
    assert json_arg, command
    folder = re.search(r"^CHAOS_RESULTS \?= (\S+)$", makefile, re.M)
    assert folder
    path = json_arg.group(1).replace("$(CHAOS_RESULTS)", folder.group(1))
    assert "$$(date" in path, "one file per run: the name carries the start time"
    sample = re.sub(r"\$\$\(date[^)]*\)", "20260101T000000Z", path).replace("$$$$", "123")
    assert not Path(sample).is_absolute()
    assert git("check-ignore", "-q", sample).returncode == 0, f"{sample} is not git-ignored"
