"""The docs keep their promises (issue #24): every code sample of the README and the tutorial runs
as pasted into a fresh Django project, and no page links a file that is not in the repository."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import find_commands

from tests.conftest import every_database
from tests.docs_samples import samples

ROOT = Path(__file__).resolve().parents[3]
#: The pages whose every python/sh block is run, in order, by tests/docs_samples.py; a page after
#: another goes on in the project the first one built (the testing how-to tests the tutorial's shop).
RUN_AS_PASTED = {
    "README.md": ["README.md"],
    "docs/tutorial.md": ["docs/tutorial.md", "docs/howto/testing.md"],
}
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _docs_database(django_db_blocker: Any) -> tuple[str, dict[str, str]]:
    """The run's database (DATABASE_URL) as the docs name it, and a fresh database on its server.

    SQLite: the project's own file, nothing to prepare. MySQL/MariaDB and PostgreSQL: a database of
    the run's name plus ``_docs`` (and no ``test_`` one left behind), created empty as the tutorial
    asks the reader to; the pasted settings block is pointed at it."""
    import dj_database_url
    from django.db import connections

    url = os.environ.get("DATABASE_URL", "sqlite://")
    if url.startswith("sqlite"):
        return "sqlite", {}
    parsed = dj_database_url.parse(url)
    name = f"{parsed['NAME']}_docs"
    db = "mysql" if "mysql" in parsed["ENGINE"] else "postgresql"
    with django_db_blocker.unblock():
        admin = connections.create_connection("default")
        # The server's own database: the run's may not exist yet (pytest-django makes test_<name>).
        admin.settings_dict = {**admin.settings_dict, "NAME": "mysql" if db == "mysql" else "postgres"}
        try:
            with admin.cursor() as cursor:
                for drop in (f"test_{name}", name):
                    cursor.execute(f"DROP DATABASE IF EXISTS {drop}")
                cursor.execute(
                    f"CREATE DATABASE {name}" + (" CHARACTER SET utf8mb4" if db == "mysql" else "")
                )
        finally:
            admin.close()
    wanted = {"NAME": name, "USER": parsed["USER"], "PASSWORD": parsed["PASSWORD"], "HOST": parsed["HOST"]}
    return db, {**wanted, "PORT": str(parsed["PORT"] or "")}


@pytest.mark.processes
@every_database("the tutorial has a settings block for each database, each run as pasted")
@pytest.mark.parametrize("page", RUN_AS_PASTED)
def test_every_sample_runs_as_pasted(page: str, tmp_path: Path, django_db_blocker: Any) -> None:
    """A brand-new startproject, the page's blocks pasted in order (the database's own block for
    the run's DATABASE_URL: the tutorial on SQLite, MariaDB and PostgreSQL), migrated, enqueued and
    drained by a runqueue."""
    if page == "README.md" and not os.environ.get("DATABASE_URL", "sqlite").startswith("sqlite"):
        pytest.skip("the README's short tutorial is SQLite's; docs/tutorial.md runs on every database")
    db, database = _docs_database(django_db_blocker)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("DATABASE_URL", None)
    env["DOCS_DB"] = db
    if database:
        env["DOCS_DATABASE"] = json.dumps(database)
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
    if page == "docs/tutorial.md":
        assert "--- tutorial.md" in done.stdout and (db == "sqlite") == (
            "transaction_mode" in _pasted(tmp_path)
        )


def _pasted(workdir: Path) -> str:
    return (workdir / "mysite" / "mysite" / "settings.py").read_text()


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


# -- every pip line of the docs, as written (issue #35) ---------------------------------------

#: The docs' placeholder for a team's copy of the repository: git is told it is the test's clone.
GIT_URL = "https://git.example.org/your-team/django-dbqueue.git"
INLINE_CODE = re.compile(r"`([^`\n]+)`")
#: ``pip install django-dbqueue[...]`` by name alone (an index), not ``django-dbqueue[...] @ git+...``.
FROM_AN_INDEX = re.compile(r"pip install ['\"]?django-dbqueue\b(?! *\[[a-z,]*\] @)")


def pip_lines() -> list[tuple[str, str]]:
    """(page, command) for every ``pip install`` of the README and docs, in sh blocks and inline code."""
    found: dict[str, str] = {}
    for page in _pages():
        if page.name == "CHANGELOG.md":  # history: what was written then
            continue
        text = page.read_text()
        name = str(page.relative_to(ROOT))
        for fence in re.finditer(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
            for line in fence.group(1).splitlines():
                if "pip install" not in line:
                    continue
                words = shlex.split(line, comments=True)
                while "&&" in words:  # `python -m venv venv && venv/bin/pip install ...`
                    at = words.index("&&")
                    words = words[at + 1 :] if "install" not in words[:at] else words[:at]
                found.setdefault(shlex.join(words), name)
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        for code in INLINE_CODE.findall(prose):
            if re.match(r"(\S*/)?pip install \S", code):
                found.setdefault(shlex.join(shlex.split(code)), name)
    return [(page, command) for command, page in found.items()]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working tree as a fresh clone (a git repository of its own) with the wheel in dist/."""
    folder = tmp_path_factory.mktemp("install") / "django-dbqueue"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=folder, check=True)
    subprocess.run([*git, "add", "-A"], cwd=folder, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clone"], cwd=folder, check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", "dist", "."],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return folder


@pytest.fixture(scope="module")
def throwaway(clone: Path) -> Path:
    venv = clone.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return venv


def test_the_docs_install_from_a_clone_a_wheel_and_a_git_url() -> None:
    commands = [command for _, command in pip_lines()]
    assert "pip install '.[mysql]'" in commands, commands
    assert any("dist/django_dbqueue-" in c for c in commands) and any(GIT_URL in c for c in commands)
    assert not [c for c in commands if FROM_AN_INDEX.search(c)], (
        "django-dbqueue is not on an index: install from the clone, a wheel or a git URL"
    )


@pytest.mark.processes  # builds the wheel: not in the smoke runs
@pytest.mark.install
def test_the_wheel_the_docs_name_is_the_one_built(clone: Path) -> None:
    from django_dbqueue import __version__

    (wheel,) = (clone / "dist").glob("*.whl")
    assert wheel.name == f"django_dbqueue-{__version__}-py3-none-any.whl"
    assert any(wheel.name in command for _, command in pip_lines())


@pytest.mark.processes
@pytest.mark.install
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "sqlite").startswith("sqlite"),
    reason="installs into a throwaway virtualenv, no database: one run (the SQLite one) is enough",
)
@pytest.mark.parametrize(("page", "command"), pip_lines(), ids=[c for _, c in pip_lines()])
def test_every_pip_line_runs_as_written(page: str, command: str, clone: Path, throwaway: Path) -> None:
    words = shlex.split(command)
    at = words.index("install")
    assert words[at - 1].endswith("pip"), command
    env = {
        **os.environ,
        # The docs' git URL is the clone (git's own URL rewriting: pip runs `git clone` as written).
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{clone.as_uri()}.insteadOf",
        "GIT_CONFIG_VALUE_0": GIT_URL,
    }
    env.pop("PYTHONPATH", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    python = str(throwaway / "bin" / "python")
    done = subprocess.run(
        [python, "-m", "pip", *words[at:]], cwd=clone, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{page}: `{command}`\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    where = subprocess.run(
        [python, "-c", "import django_dbqueue; print(django_dbqueue.__file__)"],
        cwd=throwaway,
        env=env,
        capture_output=True,
        text=True,
    )
    installs_it = any(w == "." or w.startswith((".[", "dist/")) or "git+" in w for w in words[at:])
    if installs_it:  # ... into the throwaway virtualenv (-e: the clone), not from the test's own path
        home = clone if "-e" in words else throwaway
        assert where.returncode == 0 and where.stdout.startswith(str(home)), where.stdout + where.stderr
    subprocess.run(
        [python, "-m", "pip", "uninstall", "-q", "-y", "django-dbqueue"], env=env, capture_output=True
    )
