"""A model change over HTTP: memories written with one model stay searchable while the
service, restarted with another (another dimension), re-embeds them in the background,
after the switch, and after the old table is dropped.

The other model is bge-small-zh-v1.5 on a 512-d stand-in graph (tests/models/standin.py),
so a switch really changes the vector table's dimension. One service switches there and
back, once per query route (MEMSERVE_QUERY_EMBED): the Retriever embedding each query
with the model of the table it reads (both loaded while both are active), then the
Embedder doing it; the way back also re-creates a table that was dropped before.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.models.standin import standin_model_dir
from tests.ops.conftest import client, start_service

pytestmark = pytest.mark.e2e

FACTS = [
    f"Fact {i}: my {w} is {c}"
    for i, (w, c) in enumerate(
        [
            ("car", "red"),
            ("cat", "grey"),
            ("boat", "blue"),
            ("bike", "green"),
            ("door", "white"),
            ("tent", "orange"),
            ("kite", "yellow"),
            ("lamp", "black"),
            ("mug", "purple"),
            ("hat", "pink"),
            ("sofa", "brown"),
            ("vase", "silver"),
        ]
    )
]


def all_found(c: httpx.Client, user: str, ids: dict[str, str]) -> list[str]:
    """The facts whose own text does not bring them back first (should be none)."""
    missing = []
    for text, mid in ids.items():
        r = c.post("/v1/search", json={"user_id": user, "query": text, "top_k": 3})
        assert r.status_code == 200, r.text
        if mid not in [h["id"] for h in r.json()["results"]]:
            missing.append(text)
    return missing


def models(svc) -> dict[str, dict]:
    with httpx.Client(base_url=svc.base_url, timeout=10) as c:
        r = c.get("/v1/admin/models", headers={"Authorization": f"Bearer {svc.admin_key}"})
    assert r.status_code == 200, r.text
    return {m["name"]: m for m in r.json()["models"]}


MINILM = "all-minilm-l6-v2-int8"
BGE = "bge-small-zh-v1.5"
# Re-embedded slowly enough to be seen mid-way: one text a second, so the fill (12-14
# texts) outlasts the gap between the re-embed worker's start and the Ingress being
# ready, which grows on a busy machine.
SLOW_FILL = {
    "MEMSERVE_REEMBED_RATE_PER_S": "1",
    "MEMSERVE_REEMBED_BATCH": "1",
    "MEMSERVE_REEMBED_POLL_S": "1",
    "MEMSERVE_REEMBED_SETTLE_S": "3",
}


def switch(svc, user: str, ids: dict[str, str], old: str, new: str, late: str) -> None:
    """Restart ``svc`` (stopped) on model ``new`` and follow the fill: every memory found
    from the ``old`` table meanwhile, a write during the fill found too, then everything
    from the new table, and again once the old table is dropped."""
    svc.start()
    with client(svc) as c:
        ready = c.get("/readyz").json()["components"]["models"]
        assert ready.startswith(f"ok ({old}); re-embedding into {new}"), ready
        during = models(svc)
        assert during[new]["state"] == "filling"
        assert during[old]["state"] == "active"
        assert all_found(c, user, ids) == []  # served by the old table meanwhile
        r = c.post("/v1/memories", json={"user_id": user, "content": late})  # during the fill
        assert r.status_code == 201, r.text
        ids[late] = r.json()["id"]
        deadline = time.monotonic() + 60
        while models(svc)[new]["state"] != "active":
            assert all_found(c, user, {late: ids[late]}) == []
            assert time.monotonic() < deadline, models(svc)
            time.sleep(0.5)
        time.sleep(1.5)  # replicas hear the NOTIFY (poll 1 s at the latest)
        assert c.get("/readyz").json()["components"]["models"] == f"ok ({new})"
        assert all_found(c, user, ids) == []  # now from the new table
        admin = {"Authorization": f"Bearer {svc.admin_key}"}
        slug = models(svc)[old]["slug"]
        deadline = time.monotonic() + 30
        while (r := c.delete(f"/v1/admin/models/{slug}", headers=admin)).status_code == 409:
            assert time.monotonic() < deadline, r.text  # the switch settles first
            time.sleep(0.5)
        assert r.status_code == 200, r.text
        assert list(models(svc)) == [new]
        assert all_found(c, user, ids) == []
    svc.stop()


def test_switch_keeps_every_memory_searchable_on_both_query_routes(tmp_path):
    svc = start_service(tmp_path / "svc", MEMSERVE_QUERY_EMBED="retriever")
    try:
        user = "switcher"
        with client(svc) as c:
            ids = {}
            for text in FACTS:
                r = c.post("/v1/memories", json={"user_id": user, "content": text})
                assert r.status_code == 201, r.text
                ids[text] = r.json()["id"]
            assert all_found(c, user, ids) == []
        svc.stop()
        bge = str(standin_model_dir(tmp_path / "bge-zh"))
        svc.extra_env.update(MEMSERVE_EMBED_MODEL=bge, **SLOW_FILL)
        switch(svc, user, ids, MINILM, BGE, "Fact late: my umbrella is turquoise")
        # Back to MiniLM (its table was dropped: made anew), queries through the Embedder.
        svc.extra_env.update(MEMSERVE_EMBED_MODEL=MINILM, MEMSERVE_QUERY_EMBED="embedder")
        switch(svc, user, ids, BGE, MINILM, "Fact later: my scarf is crimson")
    finally:
        svc.stop()
