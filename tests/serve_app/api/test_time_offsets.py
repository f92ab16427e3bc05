"""A datetime with an ISO offset PostgreSQL's text input refuses (±16:00 and beyond) is
stored as the same instant, not a 500 (schemathesis found it on POST /v1/memories/batch)."""

from __future__ import annotations

from datetime import datetime

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_time_offsets_test_key_0123456789"


async def test_far_offsets_in_a_batch_are_stored_not_a_500(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    items = [
        {"content": "kept until the far future", "expires_at": "8054-12-21T20:45:18.33-16:58"},
        {"content": "expired long ago", "expires_at": "0548-03-10T11:54:05+18:31"},
    ]
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        r = await c.post("/v1/memories/batch", json={"user_id": "ann", "items": items})
        assert r.status_code == 201, r.text
        stored = r.json()["memories"][0]["expires_at"]
        want = datetime.fromisoformat("8054-12-21T20:45:18.33-16:58")
        assert datetime.fromisoformat(stored) == want
        r = await c.get("/v1/memories", params={"user_id": "ann"})
        assert [m["content"] for m in r.json()["memories"]] == ["kept until the far future"]
