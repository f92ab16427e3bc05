"""The suite's guards against hangs fail as they should (tests/task_leaks.py, tests/timeouts.py).

Each guard runs in a pytest of its own (a subprocess on a scratch directory with the
root conftest's fixtures and hooks), so a leak or a hang it shows cannot touch this run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import timeouts
from tests.conftest import REPO

INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
asyncio_default_test_loop_scope = session
timeout = 600
timeout_method = thread
"""
CONFTEST = """\
from tests.conftest import (  # noqa: F401  the root conftest's guards, as in the suite
    no_task_left_at_session_end,
    no_task_left_by_test,
    task_leak_check,
    pytest_collection_modifyitems,
    pytest_timeout_set_timer,
)
"""


def run_pytest(tmp_path: Path, tests: str, timeout: float = 120) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(tests))
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


LEAKY = """\
    import asyncio
    import logging

    from serve_app.periodic import Periodic

    def flush():
        pass

    async def test_leaks_a_periodic():
        Periodic(flush, 0.01, log=logging.getLogger("x"), failed="f").start()

    async def test_next_one_starts_on_a_quiet_loop():
        mine = asyncio.current_task()
        assert [t for t in asyncio.all_tasks() if t is not mine] == []

    async def test_stops_what_it_starts():
        p = Periodic(flush, 0.01, log=logging.getLogger("x"), failed="f")
        p.start()
        await asyncio.sleep(0.05)
        await p.stop()
"""


@pytest.mark.timeout(180)  # a pytest of its own starts (imports) first
def test_a_leaked_periodic_fails_the_test_that_leaked_it_by_name(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, LEAKY)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "3 passed, 1 error" in text, text  # it passed, then its teardown failed
    assert "ERROR at teardown of test_leaks_a_periodic" in text, text
    assert "test_inner.py::test_leaks_a_periodic left asyncio tasks running" in text, text
    assert "Periodic._run (Periodic every 0.01 s, tick flush)" in text, text


@pytest.mark.timeout(180)  # a pytest of its own starts (imports) first
def test_a_task_left_by_a_session_fixture_fails_the_run(tmp_path: Path) -> None:
    out = run_pytest(
        tmp_path,
        """\
        import asyncio
        import pytest_asyncio

        async def forever():
            await asyncio.Event().wait()

        @pytest_asyncio.fixture(scope="session", loop_scope="session")
        async def server():
            asyncio.get_running_loop().create_task(forever(), name="orphan")
            yield  # never cancelled: the leak

        async def test_uses_it(server):
            pass
        """,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "The test session left asyncio tasks running" in text, text
    assert "orphan: forever" in text, text


@pytest.mark.timeout(180)  # a pytest of its own starts (imports) first
def test_a_hang_is_one_quick_failure_with_the_stacks(tmp_path: Path) -> None:
    started = time.monotonic()
    out = run_pytest(
        tmp_path,
        """\
        import asyncio
        import pytest

        async def spin():
            while True:  # the loop never idles, as issue 28's flusher did
                await asyncio.sleep(0)

        @pytest.mark.timeout(2)
        async def test_hangs():
            task = asyncio.get_running_loop().create_task(spin())
            await asyncio.sleep(3600)
            task.cancel()
        """,
    )
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "Timeout: test_inner.py::test_hangs ran past 2 s" in text, text
    assert "Stack of MainThread" in text, text
    assert time.monotonic() - started < 60  # not the 600 s ceiling


def _item(
    relative: str, fixtures: tuple[str, ...] = (), slow: bool = False, spawns: bool = False
) -> SimpleNamespace:
    marks = {"slow": object()} if slow else {}
    return SimpleNamespace(
        path=REPO / relative,
        config=SimpleNamespace(rootpath=REPO),
        fixturenames=list(fixtures),
        get_closest_marker=marks.get,
        module=SimpleNamespace(subprocess=subprocess) if spawns else None,
    )


@pytest.mark.parametrize(
    ("item", "seconds"),
    [
        (_item("tests/serve_app/test_text.py"), timeouts.UNIT_S),
        (_item("tests/serve_app/store/test_x.py", ("fresh_db", "pg_admin_dsn")), timeouts.DB_S),
        (_item("tests/models/test_export.py", slow=True), timeouts.SLOW_S),
        (_item("tests/models/test_torch_backend.py", ("torch_weights",)), timeouts.SLOW_S),
        (_item("tests/serve_app/cli/test_tenants.py", ("fresh_db",), spawns=True), 300),
        (_item("tests/deployments/test_embedder.py"), timeouts.SLOW_S),
        (_item("tests/e2e/test_api.py", ("service",)), timeouts.SERVICE_S),
        (_item("tests/security/test_abuse.py"), timeouts.SERVICE_S),
        (_item("tests/ops/test_faults.py"), timeouts.OPS_S),
        (_item("tests/loadtests/test_capacity.py"), timeouts.OPS_S),
    ],
)
def test_timeouts_by_kind(item: SimpleNamespace, seconds: int) -> None:
    assert timeouts.timeout_for(item) == seconds  # type: ignore[arg-type]


def test_this_test_gets_the_timeout_of_its_kind(request: pytest.FixtureRequest) -> None:
    # this module starts pytest processes (subprocess), so its tests have PROCESS_S
    assert request.node.get_closest_marker("timeout").args == (timeouts.PROCESS_S,)


# monkeypatch.setattr(asyncio, ...), setattr(mod.asyncio, ...), patch("asyncio.sleep"),
# and the same for the time module: every task on the session's loop would see them
_GLOBAL_PATCH = re.compile(
    r"setattr\(\s*[\w.]*\b(asyncio|time)\s*,"
    r"|setattr\(\s*[\"'](asyncio|time)\."
    r"|patch(\.object)?\(\s*[\"']?(asyncio|time)\b"
)


def test_no_test_patches_a_global_of_asyncio_or_time() -> None:
    """Inject a sleep or a clock instead (e.g. ``Reembedder(..., sleep=..., clock=...)``)."""
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path != Path(__file__)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _GLOBAL_PATCH.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_patch_check_sees_the_old_reembed_test() -> None:
    old = "monkeypatch.setattr(worker_mod.asyncio, 'sleep', record)"
    assert _GLOBAL_PATCH.search(old)
    assert _GLOBAL_PATCH.search('monkeypatch.setattr("asyncio.sleep", fake)')
    assert not _GLOBAL_PATCH.search('monkeypatch.setattr(quota, "exceeded", room_again)')
