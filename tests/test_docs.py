"""The docs keep their promises (issue #24): every code sample of the README and the tutorial runs
as pasted into a fresh Django project, and no page links a file that is not in the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import find_commands

from tests.docs_samples import samples

ROOT = Path(__file__).resolve().parent.parent
#: The pages whose every python/sh block is run, in order, by tests/docs_samples.py; a page after
#: another goes on in the project the first one built (the testing how-to tests the tutorial's shop).
RUN_AS_PASTED = {
    "README.md": ["README.md"],
    "docs/tutorial.md": ["docs/tutorial.md", "docs/howto/testing.md"],
}
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
        [sys.executable, str(ROOT / "tests" / "docs_samples.py"), str(tmp_path)]
        + [str(ROOT / path) for path in RUN_AS_PASTED[page]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert "all samples ran" in done.stdout


@pytest.mark.parametrize("page", [path for paths in RUN_AS_PASTED.values() for path in paths])
def test_every_python_block_is_run(page: str) -> None:
    """An unmarked block, or a skipped python block, is refused (samples() raises)."""
    found = samples((ROOT / page).read_text())
    assert any(s.how in ("shell", "file") for s in found) and any(s.how == "sh" for s in found)


def test_unmarked_and_skipped_python_blocks_are_refused() -> None:
    with pytest.raises(ValueError, match="without a <!-- sample"):
        samples("text\n\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="only sh blocks"):
        samples("<!-- sample: skip: no -->\n```python\nprint(1)\n```\n")


def _pages() -> list[Path]:
    return sorted(
        [*ROOT.glob("*.md"), *(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
    )


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


def _reference(name: str) -> str:
    return (ROOT / "docs" / "reference" / name).read_text()


def test_every_system_check_is_in_the_reference() -> None:
    source = "".join(path.read_text() for path in (ROOT / "django_dbqueue").rglob("*.py"))
    ids = set(re.findall(r"django_dbqueue\.[EW]\d{3}", source))
    assert ids >= {"django_dbqueue.E001", "django_dbqueue.W020"}
    assert not {i for i in ids if f"`{i}`" not in _reference("checks.md")}


def test_every_setting_is_in_the_reference() -> None:
    from django_dbqueue.conf import PREFIX, Setting, settings

    names = [PREFIX + name for name, value in vars(type(settings)).items() if isinstance(value, Setting)]
    assert "DBQUEUE_LEASE" in names
    assert not [name for name in names if f"`{name}`" not in _reference("settings.md")]


COMMANDS = sorted(find_commands(str(ROOT / "django_dbqueue" / "management")))


def test_every_command_has_a_section_in_the_reference() -> None:
    assert "runqueue" in COMMANDS
    assert not [name for name in COMMANDS if f"## `{name}`" not in _reference("commands.md")]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_option_is_in_the_reference(command: str) -> None:
    from django.core.management import load_command_class
    from django.core.management.base import BaseCommand

    ours = load_command_class("django_dbqueue", command).create_parser("manage.py", command)
    django_own = BaseCommand().create_parser("manage.py", "x")
    common = {option for action in django_own._actions for option in action.option_strings}
    options = {o for a in ours._actions for o in a.option_strings if o.startswith("--")} - common
    text = _reference("commands.md")
    assert not [o for o in options if f"`{o}" not in text]
