"""The package's shape: imports only go downward, no import cycles, functions stay short
(ruff C901 and PLR0915, in place of a module line cap), and
only backends/ asks which database it is on (issue #20; DESIGN.md "Layout"). The app's own
tables are the ground floor: they import nothing of the engine, and the engine imports them
rather than looking them up by name (issue #32).

Every import counts, a function's own as much as a module's; those under ``if
TYPE_CHECKING:`` (annotations) do not for the layers, but do for the count of cycles.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_dbqueue"

#: Layers, bottom first: a module may import its own layer (acyclically) and those below.
#: An entry is a top-level module or folder (a feature wing is one folder and one entry); a
#: dotted entry names one module of a folder that lower floors stand on (a wing's registry or
#: value type, e.g. ``messaging.handlers``) and takes that module to its own floor.
LAYERS = [
    {"compat"},  # what Python 3.11+ added, for 3.10: imports nothing of the package
    {
        "conf",
        "states",
        "signals",
        "queue.lease",  # a claim's token and lease: a value the foundation's retry policy reads
        "messaging.handlers",  # the registry of handler kinds
        "messaging.payloads",  # what a payload may hold
        "priorities",
        "exceptions",
        "retry",
        "tracebacks",  # the text a failure keeps (it reads a setting, so not in exceptions)
        "observability.traces",  # the trace context: the engine and the worker stand on it
        "observability.trace_mixin",  # the column that stores it, under the models
        "schedules.slots",  # the slot arithmetic: the schedule table stands on it
        "tasks.registry",  # the Tasks this process registered (batch callbacks resolve in it)
    },
    {"backends"},
    {"tables", "queue.row"},  # the app's own tables, and the queue's columns the engine types rows as
    {"queue"},  # the engine (and QueueMixin): it calls the wings through queue/extensions.py only
    # The feature wings: above the engine, they register into its extension points from
    # DbQueueConfig.ready() (apps.py); a wing may stand on another (a message joins a batch).
    {"fairness", "composition", "flow", "messaging", "tasks", "schedules", "observability"},
    # Durable workflows: steps over the engine's record() and the app's tables.
    {"workflows"},
    {"models"},  # the public face: Django's model discovery and the documented imports
    {
        "batches",  # deprecated shims: documented paths whose module moved into a wing
        "query",  # (or into the engine)
        "history",
        "chains",
        "handlers",
        "metrics",
        "unique",
        "worker",
        "admin",
        "spark",
        "checks",
        "settings_checks",
        "signal_handlers",
        "templatetags",
        "testing",
    },
    {"management"},
    {"apps"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST, type_only: bool = False) -> list[ast.AST]:
    """Every node, less the bodies of ``if TYPE_CHECKING:`` (unless ``type_only``)."""
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        if (
            not type_only
            and isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            stack.extend(node.orelse)
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (with ``type_only``, those imported for
    annotations under ``if TYPE_CHECKING:`` too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path)), type_only):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                submodules = [f"{origin}.{alias.name}" for alias in node.names]
                found = [m for m in submodules if m in modules]
                targets.update(found or ([origin] if origin in modules else []))
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in modules)
        targets.discard(name)
        targets.discard("django_dbqueue")  # the package's __init__: a version and nothing else
        graph[name] = targets
    return graph


def _top(module: str) -> str:
    """The module's entry in LAYERS: its most specific dotted entry, else its top-level name."""
    parts = module.split(".")[1:]
    for length in range(len(parts), 1, -1):
        if ".".join(parts[:length]) in RANK:
            return ".".join(parts[:length])
    return parts[0] if parts else ""


def test_every_module_has_a_layer() -> None:
    missing = sorted({_top(m) for m in _modules() if _top(m) and _top(m) not in RANK})
    assert not missing, f"add these to LAYERS: {missing}"


def test_imports_only_go_downward() -> None:
    upward = [
        f"{source} -> {target}"
        for source, targets in import_graph().items()
        if _top(source) in RANK
        for target in targets
        if _top(target) in RANK and RANK[_top(target)] > RANK[_top(source)]
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(sorted(upward))


def test_no_import_cycles() -> None:
    graph = import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target] if target in path else [node, target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


#: What the app's tables may import of the package: the foundation and the dialect seam
#: (``schedules.slots`` is the schedules' slot arithmetic, which imports nothing of the package).
TABLES_MAY_IMPORT = {
    "conf",
    "states",
    "exceptions",
    "signals",
    "retry",
    "backends",
    "schedules.slots",
    "tables",
}


def test_tables_import_nothing_of_the_engine() -> None:
    """Not even for annotations: the tables are what the engine stands on."""
    graph = import_graph(type_only=True)
    upward = [
        f"{source} -> {target}"
        for source, targets in graph.items()
        if _top(source) == "tables"
        for target in targets
        if _top(target) not in TABLES_MAY_IMPORT
    ]
    assert not upward, "tables/ imports the engine:\n" + "\n".join(sorted(upward))


def test_no_string_lookups_of_the_apps_own_models() -> None:
    """The engine imports the app's tables; ``apps.get_model("django_dbqueue", ...)`` hid the
    layering (it was there so the package could run outside INSTALLED_APPS, which it no
    longer promises). A label read from data (``apps.get_model(label)``) is another matter."""
    lookups = [
        f"{name}:{number}"
        for name, path in _modules().items()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""get_model\(\s*["']django_dbqueue["']""", line)
    ]
    assert not lookups, f"string lookups of the app's models: {lookups}"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_circles_counting_type_only_imports() -> None:
    """Not even for annotations does a module import one that imports it back (issue #32).

    Issue #32 started at 3 circles of 25 modules: the engine's 16 files, the worker's 6, and
    conf -> exceptions -> retry. The tables left the engine's circle first; the worker's went
    when the worker came to return outcomes (its helpers take the few values they use);
    conf -> exceptions -> retry when ``describe_error`` (which reads a setting) left
    exceptions.py for tracebacks.py. The engine's circle went when the engine came to type
    rows as ``queue.row.QueueRow`` (the queue's columns and the hooks the engine calls, on the
    tables' floor) and the wings it called came to register into its extension points
    (queue/extensions.py) instead of being imported; the last one, the QuerySet and the mixin
    naming each other, when the QuerySet became generic in its model (``QueueQuerySet[M]``,
    as django-stubs' ``QuerySet[M]``) instead of annotating its rows as ``QueueMixin``.
    """
    circles = _circles(import_graph(type_only=True))
    report = "\n".join(" ".join(circle) for circle in circles)
    assert not circles, f"{len(circles)} circles, type-only imports counted:\n{report}"


def test_functions_stay_short_and_simple() -> None:
    """Functions, not modules, are what a reader has to hold at once: ruff's C901 (complexity
    at most 15) and PLR0915 (statements per function) replace the old module line cap, which
    shaped files by line budget instead of by concept."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():  # a smoke run's virtualenv (Python 3.10, Django 5.2) has no dev tools
        pytest.skip("ruff is in the development virtualenv: make lint and its test pass run it")
    result = subprocess.run(
        [str(ruff), "check", "--select", "C901,PLR0915", "--output-format", "concise", str(PACKAGE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_backends_ask_which_database_they_are_on() -> None:
    asking = [
        name
        for name, path in _modules().items()
        if _top(name) != "backends"
        and (".vendor" in path.read_text() or "mysql_is_mariadb" in path.read_text())
    ]
    assert not asking, f"vendor questions outside backends/: {asking}"


@pytest.mark.parametrize(
    "pattern", ["connection._", ".connection.query(", "__new__(", "_do_insert", "_save_table"]
)
def test_no_private_django_machinery(pattern: str) -> None:
    users = [name for name, path in _modules().items() if pattern in path.read_text()]
    assert not users, f"{pattern!r} in {users}"


#: Documented import paths whose module moved into a feature wing's folder (issue #32): each old
#: module re-exports its public names and warns, the way Django moves names (CHANGELOG.md).
MOVED = {
    "django_dbqueue.batches": ("django_dbqueue.composition", ["batch", "message"]),
    "django_dbqueue.chains": ("django_dbqueue.composition", ["enqueue_after"]),
    "django_dbqueue.handlers": ("django_dbqueue.messaging", ["handler"]),
    "django_dbqueue.unique": ("django_dbqueue.flow", ["QueueUniqueKey", "enqueue_unique"]),
    "django_dbqueue.metrics": ("django_dbqueue.observability", ["metrics_view"]),
    "django_dbqueue.models.message": (
        "django_dbqueue.messaging.message",
        ["Message", "MessageQuerySet", "PayloadField"],
    ),
    "django_dbqueue.models.messaging": ("django_dbqueue.messaging.mixin", ["MessagingMixin"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_moved_paths_still_import_with_a_deprecation_warning(old: str) -> None:
    import importlib

    new, names = MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    current = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(current, name)


def test_the_package_imports_no_deprecated_path() -> None:
    """The shims are for users' code and migrations only."""
    shims = {old.removeprefix("django_dbqueue.") for old in MOVED}
    users = sorted(
        f"{source} -> {target}"
        for source, targets in import_graph(type_only=True).items()
        for target in targets
        if target.removeprefix("django_dbqueue.") in shims
    )
    assert not users, f"imports of deprecated paths: {users}"
