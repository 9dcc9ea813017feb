"""The shape of django_dbqueue.spark: it imports without pyspark (and matplotlib), its
modules import only downward and stay small, and every name the commands, the benchmark,
the docs and the tests take from it is exported by the package."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_dbqueue" / "spark"
#: Lowest first: a module may import only modules before it.
ORDER = ("session", "read", "columns", "enqueue", "aggregates", "render", "charts", "errors", "report")

BLOCKED_IMPORT = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j", "matplotlib"):
            raise ImportError(f"{name} is not installed (blocked by the test)")

sys.meta_path.insert(0, Block())
import django
django.setup()
import django_dbqueue.spark as pipeline
from django_dbqueue.management.commands import queue_spark_enqueue, queuereport
assert not any(m.split(".")[0] in ("pyspark", "py4j", "matplotlib") for m in sys.modules)
try:
    pipeline.spark_session()
except pipeline.SparkUnavailable as exc:
    print("refused:", exc)
"""


def test_the_package_imports_without_pyspark_and_says_what_to_install():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    env.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'tests' / 'dbqueue.sqlite3'}")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "refused: pyspark is not installed: pip install 'django-dbqueue[spark]'" in done.stdout


def _package_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.add((node.module or "").split(".")[0])
    return found


def test_modules_import_only_downward():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(ORDER)
    for name in ORDER:
        path = PACKAGE / f"{name}.py"
        below = set(ORDER[: ORDER.index(name)])
        upward = _package_imports(path) - below
        assert not upward, f"{name} imports {upward}, which are not below it"
    # The core's internals are taken in one place only.
    core = [
        p.stem for p in PACKAGE.glob("*.py") if re.search(r"from \.\.queue\.queryset import", p.read_text())
    ]
    assert core == ["enqueue"]


def test_every_name_used_from_the_package_is_exported():
    import django_dbqueue.spark as pipeline

    sources = [
        *(ROOT / "django_dbqueue" / "management" / "commands").glob("*.py"),
        *(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_spark_package.py"),
        *(ROOT / "bench").glob("*.py"),
        ROOT / "docs" / "spark.md",
        ROOT / "README.md",
    ]
    used: set[str] = set()
    for path in sources:
        text = path.read_text()
        for group, line in re.findall(r"from django_dbqueue\.spark import (?:\(([^)]*)\)|([^\n]*))", text):
            names = (group or line).split("#")[0]
            used |= {n.strip() for n in names.replace("\n", ",").split(",") if n.strip()}
        if "from django_dbqueue import spark as pipeline" in text:
            used |= set(re.findall(r"\bpipeline\.([A-Za-z_]\w*)", text))
    assert {"spark_session", "enqueue_dataframe", "queue_report", "read_history", "read_table"} <= used
    missing = sorted(name for name in used if not hasattr(pipeline, name))
    assert missing == []
    assert set(pipeline.__all__) | set(ORDER) >= used  # names, or the package's modules
