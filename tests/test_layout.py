"""The package's shape: imports only go downward, no import cycles, modules stay small, and
only backends/ asks which database it is on (issue #20; DESIGN.md "Layout").

Every import counts, a function's own as much as a module's; only those under
``if TYPE_CHECKING:`` (annotations) do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_dbqueue"

#: Layers, bottom first: a module may import its own layer (acyclically) and those below.
LAYERS = [
    {"conf", "states", "signals", "leases", "handlers", "payloads", "exceptions", "retry", "traces", "slots"},
    {"backends"},
    {"history", "partitions", "claims", "unique", "cancellation", "composition", "chains", "batches"},
    {"outcomes", "rescue", "pauses", "limits"},
    {"query"},
    {"models"},
    {
        "worker",
        "status",
        "admin",
        "schedules",
        "spark",
        "tasks",
        "checks",
        "settings_checks",
        "signal_handlers",
        "templatetags",
        "testing",
        "metrics",
    },
    {"management"},
    {"apps"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
#: Modules allowed past ~300 lines, with the reason (none yet).
LONG_MODULES: dict[str, str] = {}


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


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node, less the bodies of ``if TYPE_CHECKING:``."""
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
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
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


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


@pytest.mark.parametrize("module", sorted(_modules()))
def test_modules_stay_small(module: str) -> None:
    lines = len(_modules()[module].read_text().splitlines())
    if module in LONG_MODULES:
        pytest.skip(LONG_MODULES[module])
    assert lines <= 310, f"{module} has {lines} lines: split it by concept"


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
