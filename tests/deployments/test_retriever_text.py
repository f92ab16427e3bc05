"""The Retriever deployment embeds queries itself (issue 23, MEMSERVE_QUERY_EMBED=retriever):
``search_text`` answers as ``search`` does with the Embedder's vector, and during a model
change (active MiniLM, filling a 512-d stand-in) each query is embedded with the model
whose table it searches; both models are loaded at start."""

from __future__ import annotations

import numpy as np
import pytest

from models import load_encoder
from serve_app.bootstrap import ModelFacts
from serve_app.db.pool import open_pool
from serve_app.retrieval.query import SearchQuery
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from tests.conftest import scratch_database
from tests.models.standin import standin_model_dir

APP = "retriever-text-test"
REF_A, SLUG_A, DIM_A = "all-minilm-l6-v2-int8", "all_minilm_l6_v2_int8", 384
NAME_B, SLUG_B, DIM_B = "bge-small-zh-v1.5", "bge_small_zh_v1_5", 512
OWNER = Owner("default", "erin")
FACTS = ["I am allergic to peanuts", "My car is red", "We fly to Lisbon in May"]


@pytest.fixture(scope="module")
def ref_b(tmp_path_factory) -> str:
    return str(standin_model_dir(tmp_path_factory.mktemp("standin") / "bge-zh"))


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with scratch_database(pg_admin_dsn, "t_rtext") as dsn:
        ensure_table(dsn, SLUG_A, DIM_A)
        ensure_table(dsn, SLUG_B, DIM_B)
        yield dsn


@pytest.fixture(scope="module")
def retriever(ray_session, db, ref_b):
    from ray import serve

    from deployments.retriever import Retriever

    env = {"MEMSERVE_DATABASE_URL": db, "MEMSERVE_EMBED_DEVICE": "cpu"}
    filling = ModelFacts(NAME_B, DIM_B, SLUG_B, ref=ref_b)
    app = Retriever.options(
        name="RetrieverTextUnderTest",
        num_replicas=1,
        ray_actor_options={"num_cpus": 0.1, "runtime_env": {"env_vars": env}},
    ).bind(ModelFacts(REF_A, DIM_A, SLUG_A, ref=REF_A, filling=filling))
    handle = serve.run(app, name=APP, route_prefix=None)
    yield handle
    serve.delete(APP)


def query(text: str) -> SearchQuery:
    return SearchQuery(tenant_id="default", user_id="erin", top_k=3, text=text)


async def test_search_text_embeds_each_query_with_the_model_of_its_table(
    retriever, db, ref_b
) -> None:
    local = {REF_A: load_encoder(REF_A, device="cpu"), ref_b: load_encoder(ref_b, device="cpu")}
    pool = await open_pool(db, Settings(), min_size=1)
    try:
        for ref, slug in ((REF_A, SLUG_A), (ref_b, SLUG_B)):
            writer = GuardedWriter(pool, slug)
            vectors = local[ref].encode(FACTS)
            await writer.add(OWNER, [NewMemory(content=c) for c in FACTS], vectors, actor="t")
    finally:
        await pool.close()
    stats = await retriever.stats.remote()
    assert stats["query_models"] == sorted([REF_A, NAME_B])  # both loaded at start
    for ref, slug in ((REF_A, SLUG_A), (ref_b, SLUG_B)):
        q = query("what food am I allergic to?")
        (by_text,) = await retriever.search_text.remote([q], ref, slug)
        vector = local[ref].encode([q.text], is_query=True)[0]
        by_vector = await retriever.search.remote(q, vector, slug)
        assert [m["id"] for m in by_text] == [m["id"] for m in by_vector], slug
        np.testing.assert_allclose(
            [m["score"] for m in by_text], [m["score"] for m in by_vector], atol=1e-4
        )
        assert by_text[0]["content"] == FACTS[0], slug
    # one call, two queries of one text (a context's broad and session searches)
    broad, session = (
        query("which colour is my car?"),
        SearchQuery(
            tenant_id="default",
            user_id="erin",
            top_k=3,
            text="which colour is my car?",
            session_id="none-such",
        ),
    )
    found = await retriever.search_text.remote([broad, session], REF_A, SLUG_A)
    assert found[0][0]["content"] == FACTS[1] and found[1] == []
