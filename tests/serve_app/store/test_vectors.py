"""The vector table's global HNSW index exists only when asked for (MEMSERVE_PG_HNSW)."""

from __future__ import annotations

import psycopg
import pytest

from serve_app.reembed.plan import plan_models
from serve_app.settings import Settings
from serve_app.store.vectors import ensure_table


def indexes(dsn: str, table: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (table,)
        ).fetchall()
    return dict(rows)


def test_no_hnsw_by_default_and_the_setting_builds_or_drops_it(fresh_db) -> None:
    table = ensure_table(fresh_db, "vt", 4)
    assert set(indexes(fresh_db, table)) == {f"{table}_pkey", f"{table}_owner"}

    ensure_table(fresh_db, "vt", 4, hnsw=(8, 32))
    hnsw = indexes(fresh_db, table)[f"{table}_hnsw"]
    assert "USING hnsw" in hnsw and "m='8'" in hnsw and "ef_construction='32'" in hnsw

    ensure_table(fresh_db, "vt", 4)  # a start with the setting off drops it again
    assert f"{table}_hnsw" not in indexes(fresh_db, table)


def test_start_up_applies_the_settings(fresh_db, monkeypatch) -> None:
    """plan_models (every start) passes MEMSERVE_PG_HNSW and its parameters on."""
    calls: list[dict] = []
    monkeypatch.setattr("serve_app.reembed.plan.ensure_table", lambda *a, **kw: calls.append(kw))

    class Stop(Exception):
        """Raised where start-up goes on to the model registry: not under test here."""

    def stop(*a, **kw):
        raise Stop

    monkeypatch.setattr("serve_app.reembed.plan.reconcile", stop)
    spec = type("Spec", (), {"table_slug": "vt", "name": "m", "dim": 4})()
    for env, want, shared in (
        (None, None, (32, 128)),  # the shared owners' partial index is on by default
        ({"pg_hnsw": True, "pg_hnsw_m": 12}, (12, 64), (32, 128)),
        ({"pg_hnsw_shared_m": 24, "pg_hnsw_shared_ef_construction": 96}, None, (24, 96)),
        ({"pg_hnsw_shared": False}, None, None),
    ):
        settings = Settings(database_url=fresh_db)
        if env:
            settings = settings.with_(retrieval=env)
        with pytest.raises(Stop):
            plan_models(settings, fresh_db, spec)
        assert calls.pop() == {"hnsw": want, "shared_hnsw": shared}
