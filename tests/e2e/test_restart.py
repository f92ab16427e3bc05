"""Data survives a restart of the service (same data directory)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_memory_survives_restart(service, api, uid):
    m = api.post("/v1/memories", json={"user_id": uid, "content": "My passport expires in 2031"})
    assert m.status_code == 201
    service.restart()
    got = api.get(f"/v1/memories/{m.json()['id']}", params={"user_id": uid})
    assert got.status_code == 200 and got.json()["content"] == "My passport expires in 2031"
    hits = api.post("/v1/search", json={"user_id": uid, "query": "when does my passport expire"})
    assert hits.json()["results"][0]["id"] == m.json()["id"]
