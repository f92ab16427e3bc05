"""models/ has no import cycles, lazy (function-level) imports included.

A cycle hidden in a function-level import still breaks whoever imports the wrong module
first (issue 23: agreement -> encoder -> requantize -> agreement was one), so the walk
reads every ``import`` statement of every module with ``ast``, not only the top ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import models

PACKAGE = Path(models.__file__).parent


def import_graph(root: Path, package: str = "models") -> dict[str, set[str]]:
    """{module: modules of ``package`` it imports anywhere in its source}."""
    names = {p.stem if p.stem != "__init__" else package: p for p in root.glob("*.py")}
    qualified = {
        (package if stem == package else f"{package}.{stem}"): p for stem, p in names.items()
    }
    graph: dict[str, set[str]] = {}
    for name, path in qualified.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from models.x import y`: x, or the submodule x.y when there is one
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in qualified and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_models_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "models.encoder" in graph and graph["models.loader"] >= {"models.requantize"}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_walk_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from models.b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from models.c import g\n    return g\n")
    (tmp_path / "c.py").write_text("def g():\n    import models.a\n")
    assert find_cycle(import_graph(tmp_path)) == ["models.a", "models.b", "models.c", "models.a"]


def test_the_agreement_check_runs_a_graph_without_the_loader() -> None:
    """The piece moved down: agreement reaches the session, never the re-quantiser."""
    graph = import_graph(PACKAGE)
    seen, todo = set(), ["models.agreement"]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert "models.session" in seen
    assert not {"models.loader", "models.requantize"} & seen
