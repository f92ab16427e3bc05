"""bench_grounding's scripted run works end to end: it drives the real extraction
pipeline (embedded PostgreSQL, the int8 encoder, the scripted LLM), so a change of the
pipeline's LLM interface that the bench's memoising client misses fails here, not in a
measurement (every batch failed with a TypeError once, silently: 0 saved)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_the_scripted_run_saves_memories_in_both_variants() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "loadtests.bench_grounding", "--scripted", "--users", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    rows = dict(line.split(" ", 1) for line in lines if line.startswith(("with", "without")))
    for name in ("with_check", "without_check"):
        result = json.loads(rows[name])
        assert result["failed_batches"] == 0, result
        assert result["saved"] > 0 and result["ungrounded"] == 0, result
