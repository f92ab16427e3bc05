"""Every benchmark module imports: a benchmark nobody runs in CI must not rot when the
code it drives moves (one benchmark imported a module the layering work had removed)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

# Run from inside loadtests/ (``cd loadtests && python smoke.py``), and Locust patches
# the interpreter on import: left out.
SCRIPTS = {"locustfile", "smoke", "soak", "__init__"}


def test_every_benchmark_module_imports():
    names = sorted(p.stem for p in (REPO / "loadtests").glob("*.py") if p.stem not in SCRIPTS)
    assert len(names) > 40
    code = f"import importlib\nfor n in {names!r}:\n    importlib.import_module('loadtests.' + n)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
