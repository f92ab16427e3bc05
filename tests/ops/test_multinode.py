"""Two Ray nodes on one machine: the app spread across them still isolates and stays fresh.

``ray.cluster_utils.Cluster`` starts a head (1 CPU) and a second node (1 CPU plus a
custom ``node2`` resource). The Embedder asks for ``node2``, so it runs there; the
Retriever has two replicas at most one per node, so one runs on each. Through HTTP the
add/search/isolation round trip runs as usual; then both Retriever replicas (on
different nodes) cache the same user, and after a PATCH and a DELETE return, neither
serves the old content.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from serve_app.application import build_app
from serve_app.bootstrap import ModelFacts, bootstrap
from serve_app.ports import free_port
from serve_app.retrieval.query import SearchQuery
from serve_app.settings import Settings
from serve_app.store.keys import seed_key
from tests.conftest import scratch_database

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
APP = "memserve"
OPTIONS = {
    "Ingress": {"ray_actor_options": {"num_cpus": 0.25}},
    "Embedder": {"ray_actor_options": {"num_cpus": 0.25, "resources": {"node2": 1}}},
    "Retriever": {
        "num_replicas": 2,
        "max_replicas_per_node": 1,
        "ray_actor_options": {"num_cpus": 0.25},
    },
    "Extractor": {"ray_actor_options": {"num_cpus": 0.1}},
}


class Running:
    def __init__(self, base_url: str, key: str, alice_key: str, node2: str) -> None:
        self.base_url, self.key, self.alice_key, self.node2 = base_url, key, alice_key, node2

    def client(self, key: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60)


@pytest.fixture(scope="module")
def two_nodes(pg_admin_dsn, tmp_path_factory) -> Iterator[Running]:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    key, alice_key = "msk_mn_" + secrets.token_hex(8), "msk_mn_alice_" + secrets.token_hex(8)
    data_dir = tmp_path_factory.mktemp("multinode")
    with scratch_database(pg_admin_dsn, "t_mn") as dsn:
        settings = Settings(database_url=dsn, bootstrap_key=key, data_dir=data_dir)
        model: ModelFacts = bootstrap(settings, dsn).model
        seed_key(dsn, "default", "user", alice_key, "alice", user_id="alice")
        env = {
            "MEMSERVE_DATABASE_URL": dsn,
            "MEMSERVE_BOOTSTRAP_KEY": key,
            "MEMSERVE_DATA_DIR": str(data_dir),
        }
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        node2 = cluster.add_node(num_cpus=1, resources={"node2": 10})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, runtime_env={"env_vars": env}, log_to_driver=False)
        try:
            port = free_port()
            serve.start(proxy_location="HeadOnly", http_options={"port": port})
            serve.run(build_app(model, OPTIONS), name=APP, route_prefix="/")
            yield Running(f"http://127.0.0.1:{port}", key, alice_key, node2.node_id)
        finally:
            serve.shutdown()
            ray.shutdown()
            cluster.shutdown()


def replica_nodes(deployment: str) -> dict[int, str]:
    """pid -> node id of the live replicas of ``deployment``."""
    from ray._private.state import actors

    return {
        a["Pid"]: a["Address"]["NodeID"]
        for a in actors().values()
        if a["ActorClassName"].endswith(f":{APP}:{deployment}") and a["State"] == "ALIVE"
    }


def test_replicas_are_spread_over_both_nodes(two_nodes):
    assert set(replica_nodes("Embedder").values()) == {two_nodes.node2}
    retrievers = replica_nodes("Retriever")
    assert len(retrievers) == 2 and len(set(retrievers.values())) == 2


def test_add_search_and_isolation_across_nodes(two_nodes):
    uid = "mn_" + secrets.token_hex(4)
    with two_nodes.client(two_nodes.key) as c:
        r = c.post("/v1/memories", json={"user_id": uid, "content": "I keep bees in Porto"})
        assert r.status_code == 201, r.text
        bees = r.json()["id"]
        hits = c.post("/v1/search", json={"user_id": uid, "query": "what insects do I keep"})
        assert hits.json()["results"][0]["id"] == bees
    with two_nodes.client(two_nodes.alice_key) as c:
        assert c.get(f"/v1/memories/{bees}").status_code == 404
        hits = c.post("/v1/search", json={"query": "what insects do I keep"})
        assert hits.status_code == 200 and bees not in {m["id"] for m in hits.json()["results"]}
        assert c.post("/v1/search", json={"user_id": uid, "query": "bees"}).status_code == 403


async def test_both_retriever_replicas_stay_fresh(two_nodes):
    from ray import serve

    uid = "mn_" + secrets.token_hex(4)
    with two_nodes.client(two_nodes.key) as c:
        items = [{"content": "My favourite colour is teal"}, {"content": "I play the cello"}]
        r = c.post("/v1/memories/batch", json={"user_id": uid, "items": items})
        assert r.status_code == 201, r.text
        teal, cello = (m["id"] for m in r.json()["memories"])
    embedder = serve.get_deployment_handle("Embedder", APP)
    retriever = serve.get_deployment_handle("Retriever", APP)
    vector = np.asarray(await embedder.embed.remote("favourite colour", True), np.float32)
    q = SearchQuery(tenant_id="default", user_id=uid, top_k=10, mode="dense")

    async def search_all() -> list[dict[str, str]]:
        # No shard id: calls spread over both replicas, on both nodes.
        got = await asyncio.gather(*(retriever.search.remote(q, vector) for _ in range(8)))
        return [{str(m["id"]): m["content"] for m in res} for res in got]

    cached: dict[int, int] = {}
    for _ in range(40):  # until each replica has the user in its cache
        for res in await search_all():
            assert res.get(teal, "").endswith("teal"), (teal, res)
        for s in await asyncio.gather(*(retriever.stats.remote() for _ in range(8))):
            cached[s["pid"]] = s["entries"]
        if len(cached) == 2 and all(cached.values()):
            break
    assert len(cached) == 2 and all(cached.values()), cached
    assert set(replica_nodes("Retriever")) == set(cached)

    with two_nodes.client(two_nodes.key) as c:
        r = c.patch(
            f"/v1/memories/{teal}",
            params={"user_id": uid},
            json={"content": "My favourite colour is amber"},
        )
        assert r.status_code == 200, r.text
        for res in await search_all():
            assert res[teal] == "My favourite colour is amber"
        assert c.delete(f"/v1/memories/{cello}", params={"user_id": uid}).status_code == 204
        for res in await search_all():
            assert cello not in res and teal in res
