"""``manage.py check --deploy`` on the example project (issue 34, item 13): only the warnings a
local demo over plain http:// must have remain, each named in docs/howto/deploying.md; Django's
clickjacking protection, which the admin's one-click buttons need, is on."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "example_project"
DEPLOYING = ROOT / "docs" / "howto" / "deploying.md"

#: What a local demo must have (no HTTPS, DEBUG for runserver's static files, a placeholder key).
DEMO_WARNINGS = {
    "security.W004",
    "security.W008",
    "security.W009",
    "security.W012",
    "security.W016",
    "security.W018",
}


def check_deploy(tmp_path: Path, **env: str) -> tuple[int, set[str], str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "SECRET_KEY")}
    environ.update(DATABASE_URL=f"sqlite:///{tmp_path / 'shop.sqlite3'}", **env)
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=EXAMPLE,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    return done.returncode, set(re.findall(r"\(([\w.]+\.[EW]\d+)\)", output)), output


def test_only_the_demo_warnings_remain_and_the_docs_name_each(tmp_path: Path) -> None:
    code, found, output = check_deploy(tmp_path)
    assert code == 0, output
    assert found == DEMO_WARNINGS, output
    assert "security.W002" not in found  # XFrameOptionsMiddleware is in MIDDLEWARE
    docs = DEPLOYING.read_text()
    assert "## Security" in docs
    assert not [w for w in sorted(DEMO_WARNINGS) if f"`{w}`" not in docs]


def test_a_real_secret_key_removes_its_warning(tmp_path: Path) -> None:
    code, found, output = check_deploy(tmp_path, SECRET_KEY=secrets.token_urlsafe(50))
    assert code == 0, output
    assert found == DEMO_WARNINGS - {"security.W009"}, output
