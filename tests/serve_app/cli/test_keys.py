"""``python -m serve_app create-key`` refuses the owners the API refuses (reserved ``@`` ids,
bad shapes, a user key without its user) before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from serve_app.cli.keys import check
from serve_app.db.migrations import migrate
from tests.conftest import REPO


def create_key(dsn: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSERVE_")}
    env["MEMSERVE_DATABASE_URL"] = dsn
    return subprocess.run(
        [sys.executable, "-m", "serve_app", "create-key", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def keys(dsn: str) -> list[tuple[str, str | None]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT role, user_id FROM api_keys ORDER BY created_at").fetchall()


def test_a_reserved_user_id_is_refused_and_nothing_is_written(fresh_db):
    migrate(fresh_db)
    run = create_key(fresh_db, "--role", "user", "--user-id", "@org")
    assert run.returncode != 0 and "must not start with '@'" in run.stderr, run.stderr
    assert "msk_" not in run.stdout and keys(fresh_db) == []
    run = create_key(fresh_db, "--role", "user", "--user-id", "bob")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith("msk_") and keys(fresh_db) == [("user", "bob")]


@pytest.mark.parametrize(
    ("role", "user_id", "says"),
    [
        ("user", "@agent:helper", "must not start with '@'"),
        ("user", "has space", "should match pattern"),
        ("user", "x" * 129, "at most 128"),
        ("user", None, "a user key needs user_id"),
        ("service", "bob", "service keys act for any user"),
        ("admin", "bob", "admin keys act for any user"),
    ],
)
def test_owners_the_api_refuses_are_refused(role, user_id, says):
    with pytest.raises(SystemExit) as refused:
        check(role, user_id)
    assert says in str(refused.value)


@pytest.mark.parametrize(("role", "user_id"), [("user", "bob"), ("service", None), ("admin", None)])
def test_owners_the_api_accepts_pass(role, user_id):
    check(role, user_id)
