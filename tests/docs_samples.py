"""Run a Markdown page's code samples in order, as a reader would paste them (tests/test_docs_samples.py).

Every fenced ``python`` or ``sh`` block of a page under test carries a comment just above it that
says what the reader does with it (the comment is invisible on GitHub and in the docs site)::

    <!-- sample: file shop/models.py -->      the block is that file's content (a new file)
    <!-- sample: append mysite/settings.py --> the block goes at the end of that file
    <!-- sample: shell -->                    typed into `manage.py shell` (one session per page)
    <!-- sample: shell; prints: paid succeeded -->   ... and its output must contain that text
    <!-- sample: append mysite/settings.py; db: mysql -->  only for that database (one block each)
    <!-- sample: sh -->                       typed into a terminal in the project's folder
    <!-- sample: skip: why -->                not run here (only for sh blocks; the reason is kept)

Run as a script (``python docs_samples.py WORKDIR PAGE [PAGE ...]``; later pages go on in the
project the earlier ones built, in the same shell session) so that the shell session gets a Django
of its own, set up from the reader's project, not from the test suite's settings.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(
    r"<!--\s*sample:\s*(?P<how>[a-z]+)(?::\s*|\s+)?(?P<arg>.*?)\s*(?:;\s*prints:\s*(?P<prints>.*?))?"
    r"\s*(?:;\s*db:\s*(?P<db>sqlite|mysql|postgresql))?\s*-->"
)
#: The database the run pastes the blocks of (``DOCS_DB``: sqlite, mysql or postgresql), and the
#: connection settings it points the pasted block at (``DOCS_DATABASE``, JSON: NAME, USER, HOST, ...),
#: as a reader would put their own server's in.
DOCS_DB = os.environ.get("DOCS_DB", "sqlite")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)[^\n]*\n(?P<body>.*?)^```", re.S | re.M)


@dataclass
class Sample:
    how: str
    arg: str
    prints: str
    lang: str
    body: str
    line: int
    db: str = ""


def samples(text: str) -> list[Sample]:
    """The page's python and sh blocks with their markers; an unmarked one is an error."""
    found = []
    for fence in FENCE.finditer(text):
        if fence.group("lang") not in ("python", "sh"):
            continue
        line = text.count("\n", 0, fence.start()) + 1
        before = text[: fence.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(before.strip())
        if marker is None:
            raise ValueError(
                f"line {line}: a {fence.group('lang')} block without a <!-- sample: ... --> comment"
            )
        how, arg = marker.group("how"), marker.group("arg").strip()
        if how not in ("file", "append", "shell", "sh", "skip"):
            raise ValueError(f"line {line}: unknown sample kind {how!r}")
        if how == "skip" and (fence.group("lang") != "sh" or not arg):
            raise ValueError(f"line {line}: only sh blocks may be skipped, and with a reason")
        found.append(
            Sample(
                how,
                arg,
                marker.group("prints") or "",
                fence.group("lang"),
                fence.group("body"),
                line,
                marker.group("db") or "",
            )
        )
    return found


def run_sh(body: str, cwd: Path) -> Path:
    """Each command line; ``cd`` moves the terminal; ``python``/``django-admin`` are this Python's."""
    for line in body.splitlines():
        line = line.split(" #", 1)[0].strip()
        for command in filter(None, (part.strip() for part in line.split("&&"))):
            words = shlex.split(command)
            if words[0] == "cd":
                cwd = cwd / words[1]
                continue
            if words[0] == "python":
                words[0] = sys.executable
            elif words[0] == "django-admin":
                words[:1] = [sys.executable, "-m", "django"]
            done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=300)
            print(done.stdout + done.stderr)
            if done.returncode:
                raise SystemExit(f"`{command}` failed ({done.returncode})")
    return cwd


def main(workdir: Path, pages: list[Path]) -> None:
    cwd = workdir
    namespace: dict[str, object] = {}
    django_ready = False
    # Every page's markers are read (and checked) before anything runs; the shell moves the cwd.
    steps = [(path.resolve(), sample) for path in pages for sample in samples(path.read_text())]
    for page, sample in steps:
        if sample.db and sample.db != DOCS_DB:
            continue  # another database's block
        print(f"--- {page.name}:{sample.line}: {sample.how} {sample.arg}", flush=True)
        if sample.how in ("file", "append"):
            target = cwd / sample.arg
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("w" if sample.how == "file" else "a") as out:
                out.write(("\n" if sample.how == "append" else "") + sample.body)
                if sample.db and os.environ.get("DOCS_DATABASE"):
                    # The run's own server and database name, where the reader puts theirs.
                    out.write(f"\nDATABASES['default'].update({os.environ['DOCS_DATABASE']})\n")
        elif sample.how == "sh":
            cwd = run_sh(sample.body, cwd)
        elif sample.how == "shell":
            if not django_ready:
                # `manage.py shell` of the project the page built: its settings, its folder first.
                sys.path.insert(0, str(cwd))
                os.chdir(cwd)
                os.environ["DJANGO_SETTINGS_MODULE"] = (
                    next(cwd.glob("*/settings.py")).parent.name + ".settings"
                )
                import django

                django.setup()
                django_ready = True
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                exec(compile(sample.body, f"{page.name}:{sample.line}", "exec"), namespace)
            print(output.getvalue())
            if sample.prints and sample.prints not in output.getvalue():
                raise SystemExit(
                    f"{page.name}:{sample.line}: expected {sample.prints!r} in {output.getvalue()!r}"
                )
            from django.db import connections

            # A terminal's next command (a runqueue) must not wait behind this session's SQLite lock.
            connections.close_all()
    print("all samples ran")


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(arg) for arg in sys.argv[2:]])
