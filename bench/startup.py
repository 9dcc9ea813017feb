"""``runqueue``'s start-up time and the package's import time (issue #31, item 6).

* **start-up**: launch of a real ``manage.py runqueue --burst`` (the example project, an empty
  SQLite queue) to the first ``consuming`` log line, the median of ``--runs`` launches;
* **import**: ``python -X importtime -c 'import django; django.setup()'`` for the same project,
  and the part of it that is this package's own modules (the cumulative times of the
  ``django_dbqueue…`` lines that no other module's import contains: the models, the admin,
  the ``django.tasks`` backend, the checks).

Prints the figures and a ``met``/``missed`` line against the floor: the 0.67 s the command
took before the rebuild (``FLOOR``). Run by ``make bench`` and ``make bench-startup``; with
``--strict`` the exit code is 1 when the floor is missed. Figures from a loaded machine are
high: run it idle.

    python bench/startup.py [--runs 5] [--strict]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "example_project"
#: Seconds from launch to the first "consuming" line before the rebuild (issue #31).
FLOOR = 0.67


def environment(database: Path) -> dict[str, str]:
    # This checkout's package, whatever the virtualenv has installed.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "PYTHONPATH": path}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def launch_to_consuming(env: dict[str, str]) -> float:
    """One launch: seconds until the worker logs that it is consuming."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runqueue", "--burst", "--no-progress", "--no-schedules"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = None
    for line in proc.stderr:
        if seen is None and "consuming" in line:
            seen = time.monotonic() - started
    if proc.wait() != 0 or seen is None:
        raise SystemExit(f"runqueue failed (exit code {proc.returncode}, consuming seen: {seen})")
    return seen


def import_times(env: dict[str, str]) -> tuple[float, float]:
    """(django.setup()'s imports, this package's part of them) in seconds, by -X importtime."""
    code = (
        "import django, os; "
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'example_project.settings'); django.setup()"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    total = ours = 0
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if not found or len(found[2]) != 1:  # only top-level lines: they add up to the whole
            continue
        total += int(found[1])
        if found[3].startswith("django_dbqueue"):
            ours += int(found[1])
    return total / 1e6, ours / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="launches to take the median of (default 5)")
    parser.add_argument("--strict", action="store_true", help="exit code 1 when the floor is missed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dbqueue-startup-") as tmp:
        env = environment(Path(tmp) / "startup.sqlite3")
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=PROJECT, env=env, check=True)
        launch_to_consuming(env)  # warm the file cache and the bytecode of a first run
        times = [launch_to_consuming(env) for _ in range(args.runs)]
        imports = [import_times(env) for _ in range(3)]
        setup = statistics.median(value for value, _ in imports)
        ours = statistics.median(value for _, value in imports)
    median = statistics.median(times)
    print(f"runqueue start-up, launch to first 'consuming' line: median {median:.3f} s of {args.runs}")
    print(f"  each: {', '.join(f'{value:.3f}' for value in times)}")
    print(f"imports of django.setup() (-X importtime): {setup:.3f} s, of which django_dbqueue: {ours:.3f} s")
    met = median <= FLOOR
    print(f"start-up floor {FLOOR:.2f} s: {'met' if met else 'missed'} ({median:.3f} s)")
    return 0 if met or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())
