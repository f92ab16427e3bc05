"""Searching by query text (issue 23), on both routes (MEMSERVE_QUERY_EMBED), with the real
int8 MiniLM, the real retriever and real PostgreSQL.

The retriever route embeds in the retriever (QueryEmbedder); the embedder route asks the
embed callable (the Embedder's role). Both must give the same answers; a context's two
searches embed their one text once.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from models.encoder import Encoder
from models.encoder_set import EncoderSet
from serve_app.bootstrap import bootstrap
from serve_app.db.pool import open_pool
from serve_app.profile.cues import CLASSES, PROTOTYPES
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.query_embed import QueryEmbedder, search_texts
from serve_app.retrieval.retriever import Retriever
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_query_embed_test_key_0123456789"
FACTS = [
    "My daughter Mia starts violin lessons on Thursdays",
    "I am allergic to peanuts",
    "We are flying to Lisbon in May",
]
DIM = 384


class Counting:
    """The real encoder's texts, counted per call (what each route asks it to embed)."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.calls: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.encoder.encode(texts, is_query=True)


def q(text: str, **kw) -> SearchQuery:
    return SearchQuery(tenant_id="default", user_id="alice", top_k=3, text=text, **kw)


async def write_facts(client) -> list[str]:
    """FACTS for alice through the API (the last two in session s1); their ids."""
    items = [{"content": c} | ({"session_id": "s1"} if i else {}) for i, c in enumerate(FACTS)]
    r = await client.post("/v1/memories/batch", json={"user_id": "alice", "items": items})
    assert r.status_code == 201, r.text
    return [m["id"] for m in r.json()["memories"]]


async def test_each_distinct_text_is_embedded_once_and_results_keep_query_order(
    fresh_db, encoder
) -> None:
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (client, _):
        ids = await write_facts(client)
    pool = await open_pool(fresh_db, settings, min_size=1)
    retriever = Retriever(pool, boot.model.table_slug, settings)
    try:
        embed = Counting(encoder)
        text = "when is the kid's music class?"
        broad, session = q(text), q(text, session_id="s1")
        found = await search_texts([broad, session, q("peanuts")], embed, retriever.search)
        assert embed.calls == [[text, "peanuts"]]  # one call, one row per distinct text
        assert str(found[0][0]["id"]) == ids[0]  # the violin lesson
        assert ids[0] not in [str(m["id"]) for m in found[1]]  # not in session s1
        assert str(found[2][0]["id"]) == ids[1]
        vector = encoder.encode([text], is_query=True)[0]
        by_vector = await retriever.search(broad, vector)  # as a search by vector
        assert [m["id"] for m in found[0]] == [m["id"] for m in by_vector]
        assert await search_texts([], embed, retriever.search) == []
    finally:
        await retriever.close()
        await pool.close()


async def test_query_embedder_gives_the_encoders_query_vectors(encoder) -> None:
    embedder = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder))
    texts = ["what am I allergic to?", "ok"]
    got = await embedder.embed(texts)
    assert got.shape == (2, DIM) and got.dtype == np.float32
    np.testing.assert_allclose(got, encoder.encode(texts, is_query=True), atol=1e-6)
    embedder.close()


@pytest.mark.parametrize("route", ["retriever", "embedder"])
async def test_search_and_context_answer_alike_on_both_routes(fresh_db, encoder, route) -> None:
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY).with_(
        retrieval={"query_embed": route}
    )
    assert settings.retrieval.query_embed == route
    boot = bootstrap(settings, fresh_db)
    embedded: list[tuple[list[str], bool]] = []
    api = in_process_api(settings, boot.model, fresh_db, encoder, KEY, embedded=embedded)
    async with api as (client, _):
        ids = await write_facts(client)
        r = await client.post(
            "/v1/search", json={"user_id": "alice", "query": "when is the kid's music class?"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["id"] == ids[0]
        r = await client.post("/v1/search", json={"user_id": "bob", "query": "violin"})
        assert r.json()["results"] == []  # one user never sees another's memories
        r = await client.post(
            "/v1/context",
            json={"user_id": "alice", "query": "what food must I avoid?", "session_id": "s1"},
        )
        assert r.status_code == 200, r.text
        assert "peanuts" in r.json()["context"]
    queries = [texts for texts, is_query in embedded if is_query]
    # the write, then (once per process) the profile classifier's prototypes (issue 29)
    prototypes = [t for c in CLASSES for t in PROTOTYPES[c]]
    assert [texts for texts, is_query in embedded if not is_query] == [FACTS, prototypes]
    if route == "retriever":
        assert queries == []  # the retriever embedded every query itself
    else:  # the embed backend (the Embedder) got each query, the context's once
        assert queries == [
            ["when is the kid's music class?"],
            ["violin"],
            [r.json()["search_query"]],
        ]


def test_the_route_setting_reads_memserve_query_embed(monkeypatch) -> None:
    assert Settings().retrieval.query_embed == "retriever"  # the default: one hop
    monkeypatch.setenv("MEMSERVE_QUERY_EMBED", "embedder")
    assert Settings().retrieval.query_embed == "embedder"
    monkeypatch.setenv("MEMSERVE_QUERY_EMBED", "gpu")
    with pytest.raises(ValueError):
        Settings()


QUESTIONS = ["what am I allergic to?", "where do we fly in May?", "violin", "ok", "kids"]


async def test_concurrent_queries_share_one_encoder_run(encoder) -> None:
    """Asks that queue while the worker is busy go in one run, each caller gets its rows."""
    embedder = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder), max_batch=16)
    try:
        got = await asyncio.gather(*(embedder.embed([t]) for t in QUESTIONS))
        assert embedder.runs == 1
        alone = encoder.encode(QUESTIONS, is_query=True)
        for i, vectors in enumerate(got):
            assert vectors.shape == (1, DIM)
            assert float(vectors[0] @ alone[i]) > 0.999  # its own text's vector
        pair = await embedder.embed(["ok", "violin"])  # rows in the caller's order
        assert float(pair[0] @ alone[3]) > 0.999 and float(pair[1] @ alone[2]) > 0.999
    finally:
        embedder.close()


async def test_runs_hold_at_most_max_batch_texts(encoder) -> None:
    embedder = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder), max_batch=2)
    try:
        await asyncio.gather(*(embedder.embed([t]) for t in QUESTIONS))
        assert embedder.runs == 3  # 2 + 2 + 1
        one_by_one = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder), max_batch=1)
        await asyncio.gather(*(one_by_one.embed([t]) for t in QUESTIONS))
        assert one_by_one.runs == len(QUESTIONS)
        one_by_one.close()
    finally:
        embedder.close()


class Failing:
    """An encoder whose runs fail while ``broken``: every caller of the run must hear it."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder, self.broken = encoder, True
        self.spec = encoder.spec

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        if self.broken:
            raise RuntimeError("onnx run failed")
        return self.encoder.encode(texts, is_query=is_query)

    def warmup(self) -> None: ...


async def test_a_failed_run_fails_its_callers_and_the_next_run_works(encoder) -> None:
    failing = Failing(encoder)
    embedder = QueryEmbedder(EncoderSet(failing, lambda ref: failing), max_batch=16)
    try:
        got = await asyncio.gather(
            *(embedder.embed([t]) for t in QUESTIONS[:3]), return_exceptions=True
        )
        assert all(isinstance(g, RuntimeError) for g in got)
        failing.broken = False
        assert (await embedder.embed(["ok"])).shape == (1, DIM)
    finally:
        embedder.close()


async def test_a_cancelled_caller_leaves_the_others_answered(encoder) -> None:
    embedder = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder), max_batch=16)
    try:
        first = asyncio.ensure_future(embedder.embed(["violin"]))
        await asyncio.sleep(0)  # the worker is running "violin"
        gone = asyncio.ensure_future(embedder.embed(["kids"]))
        kept = asyncio.ensure_future(embedder.embed(["ok"]))
        await asyncio.sleep(0)
        gone.cancel()
        assert (await first).shape == (1, DIM) and (await kept).shape == (1, DIM)
        assert gone.cancelled()
    finally:
        embedder.close()


def test_the_batch_setting_reads_memserve_query_batch_max(monkeypatch) -> None:
    assert Settings().retrieval.query_batch_max == 16
    monkeypatch.setenv("MEMSERVE_QUERY_BATCH_MAX", "1")
    assert Settings().retrieval.query_batch_max == 1
    monkeypatch.setenv("MEMSERVE_QUERY_BATCH_MAX", "0")
    with pytest.raises(ValueError):
        Settings()


MENU = "Suggest a dinner menu for guests on Saturday"
BARE = ((0, 7), (8, 9), (10, 16), (17, 21), (22, 25), (26, 32))  # without "on Saturday"


async def test_views_and_plain_asks_share_one_run_and_get_their_rows(encoder) -> None:
    """A context's views (issue 29) ride the same coalesced run as other callers' texts."""
    embedder = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder), max_batch=16)
    try:
        plain, views = await asyncio.gather(
            embedder.embed(["violin", MENU]), embedder.embed_views([MENU], [[BARE, ((0, 7),)]])
        )
        assert embedder.runs == 1
        want = encoder.encode_views([MENU], [[BARE, ((0, 7),)]], is_query=True)[0]
        assert plain.shape == (2, DIM) and len(views) == 1 and views[0].shape == (3, DIM)
        np.testing.assert_allclose(views[0], want, atol=1e-5)
        np.testing.assert_allclose(plain[1], want[0], atol=1e-5)
        assert float(plain[0] @ encoder.encode(["violin"], is_query=True)[0]) > 0.999
    finally:
        embedder.close()


async def test_search_texts_pools_views_where_the_route_can(encoder) -> None:
    """With ``embed_views`` a query that is a view of another text gets the view's vector
    (one run for the text); without it, its own text is embedded (the Embedder route)."""
    embedder = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder))
    bare = "Suggest a dinner menu for guests"
    queries = [q(MENU), q(bare, view_of=MENU, view_spans=BARE, mode="dense"), q("violin")]
    seen: list[tuple[str, np.ndarray]] = []

    async def search(query: SearchQuery, vector: np.ndarray) -> list[dict]:
        seen.append((query.text, vector))
        return [{"text": query.text}]

    embed = Counting(encoder)
    try:
        out = await search_texts(queries, embed, search, embedder.embed_views)
        assert [r[0]["text"] for r in out] == [MENU, bare, "violin"]
        assert embed.calls == [] and embedder.runs == 1
        views = encoder.encode_views([MENU, "violin"], [[BARE], []], is_query=True)
        got = dict(seen)
        np.testing.assert_allclose(got[MENU], views[0][0], atol=1e-5)
        np.testing.assert_allclose(got[bare], views[0][1], atol=1e-5)
        np.testing.assert_allclose(got["violin"], views[1][0], atol=1e-5)
        seen.clear()
        await search_texts(queries, embed, search)  # no views on this route
        assert embed.calls == [[MENU, bare, "violin"]]
        alone = encoder.encode([bare], is_query=True)[0]
        np.testing.assert_allclose(dict(seen)[bare], alone, atol=1e-5)
    finally:
        embedder.close()
