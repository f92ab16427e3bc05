"""A model change over HTTP: memories written with model A stay searchable while the
service, restarted with model B (another dimension), re-embeds them in the background,
after the switch, and after the old table is dropped.

Model B is bge-small-zh-v1.5 on a 512-d stand-in graph (tests/models/standin.py), so
the switch really changes the vector table's dimension. Both query routes
(MEMSERVE_QUERY_EMBED, issue 23): the Retriever embedding each query with the model of
the table it reads (both loaded while both are active), and the Embedder doing it.
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


@pytest.mark.parametrize("route", ["retriever", "embedder"])
def test_switch_keeps_every_memory_searchable(tmp_path, route):
    data = tmp_path / "svc"
    svc = start_service(data, MEMSERVE_QUERY_EMBED=route)
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
        # Model B, re-embedded slowly enough to be seen mid-way (4 texts/s, batches of 2).
        svc.extra_env.update(
            MEMSERVE_EMBED_MODEL=str(standin_model_dir(tmp_path / "bge-zh")),
            MEMSERVE_REEMBED_RATE_PER_S="4",
            MEMSERVE_REEMBED_BATCH="2",
            MEMSERVE_REEMBED_POLL_S="1",
            MEMSERVE_REEMBED_SETTLE_S="3",
        )
        svc.start()
        with client(svc) as c:
            ready = c.get("/readyz").json()["components"]["models"]
            assert ready.startswith("ok (all-minilm-l6-v2-int8); re-embedding into bge-small-zh")
            during = models(svc)
            assert during["bge-small-zh-v1.5"]["state"] == "filling"
            assert during["all-minilm-l6-v2-int8"]["state"] == "active"
            assert all_found(c, user, ids) == []  # served by the old table meanwhile
            late = "Fact late: my umbrella is turquoise"  # written during the fill
            r = c.post("/v1/memories", json={"user_id": user, "content": late})
            ids[late] = r.json()["id"]
            deadline = time.monotonic() + 60
            while models(svc)["bge-small-zh-v1.5"]["state"] != "active":
                assert all_found(c, user, {late: ids[late]}) == []
                assert time.monotonic() < deadline, models(svc)
                time.sleep(0.5)
            time.sleep(1.5)  # replicas hear the NOTIFY (poll 1 s at the latest)
            assert c.get("/readyz").json()["components"]["models"] == "ok (bge-small-zh-v1.5)"
            assert all_found(c, user, ids) == []  # now from the 512-d table
            admin = {"Authorization": f"Bearer {svc.admin_key}"}
            deadline = time.monotonic() + 30
            while (
                r := c.delete("/v1/admin/models/all_minilm_l6_v2_int8", headers=admin)
            ).status_code == 409:
                assert time.monotonic() < deadline, r.text  # the switch settles first
                time.sleep(0.5)
            assert r.status_code == 200, r.text
            assert list(models(svc)) == ["bge-small-zh-v1.5"]
            assert all_found(c, user, ids) == []
    finally:
        svc.stop()
