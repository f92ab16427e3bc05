"""Versioned schema migrations, applied at start-up under an advisory lock.

Each ``migrations/NNNN_name.sql`` file runs once, in order, in its own
transaction; applied versions are recorded in ``schema_migrations``.
"""

from __future__ import annotations

import logging
from importlib import resources

import psycopg

log = logging.getLogger(__name__)
_LOCK_ID = 0x6D656D73  # "mems"


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every packaged migration, ascending."""
    out = []
    for entry in resources.files("serve_app.db").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text()))
    return sorted(out)


def migrate(dsn: str) -> list[int]:
    """Apply pending migrations; return the versions applied now."""
    applied_now: list[int] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, sql in available():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
                log.info("applied migration %s", name)
                applied_now.append(version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied_now
