"""No import circle inside ``domain/``, ``projections/`` or ``service/`` (issue #14).

The graph is read from the sources with ``ast``, and it counts EVERY import statement: those at
module level, those inside functions (lazy imports) and those under ``if TYPE_CHECKING:``. A
circle that only a lazy or a type-checking import closes still ties the modules together: none
of them can be read, moved or tested without the others, which is what the rule is against.
(Python tolerates such circles at run time; a newcomer does not.)

A ``from package import name`` is an edge to ``package.name`` when that is a module of ours,
else to ``package``. Package ``__init__`` modules are nodes like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("domain", "projections", "service")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _our_modules() -> dict[str, Path]:
    return {_module_name(path): path for layer in LAYERS for path in (ROOT / layer).rglob("*.py")}


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """``{module: the modules of ours it imports}`` over every import statement."""
    modules = _our_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = _package_of(name, path).split(".")
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join([*package, base] if base else package)
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    targets.append(candidate if candidate in modules else base)
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b"]]
    real = import_graph()
    # service.cli.app imports the api lazily (inside ``serve``): the edge must be there.
    assert "service.api.app" in real["service.cli.app"]


def test_no_import_cycle_in_domain_projections_or_service() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(component) for component in found
    )


# Inside service/: the write side uses no other wing, the jobs use only the write side.
WINGS_BELOW = {
    "service.commands": ("service.jobs", "service.api", "service.cli", "service.replay",
                         "service.audit", "service.container"),
    "service.jobs": ("service.api", "service.cli", "service.replay", "service.audit",
                     "service.container"),
}


def test_the_wings_of_service_point_one_way() -> None:
    graph = import_graph()
    offending = [
        f"{module} imports {target}"
        for wing, forbidden in WINGS_BELOW.items()
        for module, targets in graph.items()
        if module == wing or module.startswith(wing + ".")
        for target in targets
        if any(target == f or target.startswith(f + ".") for f in forbidden)
    ]
    assert not offending, offending
