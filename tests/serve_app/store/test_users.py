"""The users directory reads one page of users, not the whole tenant, for every page."""

from __future__ import annotations

import json

import psycopg
from psycopg.rows import dict_row

from serve_app.store.users import _USERS_SQL

USERS, PER_USER = 3000, 10


def seed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO memory_items (id, tenant_id, user_id, type, content, dedupe_hash)"
            " SELECT gen_random_uuid(), 't', 'u' || lpad((i / %s)::text, 5, '0'), 'fact',"
            " 'memory ' || i, md5(i::text) FROM generate_series(0, %s - 1) i",
            (PER_USER, USERS * PER_USER),
        )
        conn.execute(
            "INSERT INTO memory_items (id, tenant_id, user_id, type, content, dedupe_hash)"
            " SELECT gen_random_uuid(), 'other', 'u00000', 'fact', 'x', 'h'"
        )
        conn.execute("ANALYZE memory_items")


def rows_read(plan: dict, table: str) -> int:
    """Rows the plan's scans of ``table`` returned, all loops counted."""
    own = plan["Actual Rows"] * plan["Actual Loops"] if plan.get("Relation Name") == table else 0
    return own + sum(rows_read(p, table) for p in plan.get("Plans", []))


def test_a_page_of_users_reads_that_page_only(fresh_db):
    seed(fresh_db)
    params = {"t": "t", "u": None, "after": "", "fetch": 51}
    with psycopg.connect(fresh_db, row_factory=dict_row) as conn:
        page = conn.execute(_USERS_SQL, params).fetchall()
        [[plan]] = (
            conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _USERS_SQL, params, prepare=False)
            .fetchone()
            .values()
        )
        later = conn.execute(_USERS_SQL, {**params, "after": "u02000"}).fetchall()
    if isinstance(plan, str):
        plan = json.loads(plan)[0]
    assert [r["user_id"] for r in page] == [f"u{i:05d}" for i in range(51)]
    assert {r["memories"] for r in page} == {PER_USER}
    assert [r["user_id"] for r in later][:2] == ["u02001", "u02002"]
    # The old statement aggregated all 30,000 rows of the tenant for a page of 51 users.
    assert rows_read(plan["Plan"], "memory_items") <= 4 * 51 * PER_USER
