"""Shared fixtures: one embedded PostgreSQL + pgvector server per test session."""

from __future__ import annotations

import os
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


@pytest.fixture
def fresh_db(pg_admin_dsn) -> str:
    """A new, migrated database per test (cheap: CREATE DATABASE from template0)."""
    name = f"t_{os.urandom(6).hex()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_admin_dsn.replace("/postgres?", f"/{name}?")
    migrate(dsn)
    yield dsn
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def ray_session(pg_admin_dsn):
    """One in-process Ray for every test that deploys Serve apps directly.

    Replicas get ``MEMSERVE_DATABASE_URL`` of the session's embedded server.
    Tests that need the whole service over HTTP use ``tests/e2e`` instead.
    """
    import ray
    from ray import serve

    os.environ["MEMSERVE_DATABASE_URL"] = pg_admin_dsn
    if not ray.is_initialized():
        ray.init(
            num_cpus=4,
            include_dashboard=False,
            runtime_env={"env_vars": {"MEMSERVE_DATABASE_URL": pg_admin_dsn}},
            logging_level="WARNING",
        )
    yield ray
    serve.shutdown()
    ray.shutdown()
