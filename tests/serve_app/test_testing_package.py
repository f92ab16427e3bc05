"""serve_app.testing (the stand-ins and launchers tests and benchmarks share) stays apart.

The service never imports it (lazy, function-level imports included), and importing
any of its modules needs no pytest (a dev dependency only): loadtests import them too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTING = REPO / "serve_app" / "testing"


def imported(path: Path) -> set[str]:
    """Every module name an ``import`` statement of ``path`` names, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_nothing_outside_the_package_imports_it() -> None:
    offenders = []
    for root in ("serve_app", "deployments", "models"):
        for path in sorted((REPO / root).rglob("*.py")):
            if TESTING in path.parents:
                continue
            hits = {n for n in imported(path) if n.split(".")[:2] == ["serve_app", "testing"]}
            if hits:
                offenders.append(f"{path.relative_to(REPO)}: {sorted(hits)}")
    assert not offenders


def test_its_modules_import_without_pytest() -> None:
    modules = sorted(f"serve_app.testing.{p.stem}" for p in TESTING.glob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
