"""Documents (issue 33) through DocumentService and DocumentStore against a real
PostgreSQL + pgvector: chunk rows, atomic re-post, isolation, quotas, delete, forget."""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest

from serve_app.auth import Principal
from serve_app.documents.chunking import load_tokenizer, sizes_for
from serve_app.errors import ApiError
from serve_app.schemas.documents import (
    DocumentDetail,
    DocumentInput,
    DocumentOut,
    ExportedDocument,
)
from serve_app.services.documents import DocumentService
from serve_app.settings import DocumentSettings, get_settings
from serve_app.store import Owner, quota
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM

SERVICE = Principal("k-svc", "t1", "service")
ALICE = Principal("k-alice", "t1", "user", user_id="alice")
BOB = Principal("k-bob", "t1", "user", user_id="bob")
OTHER = Principal("k-other", "t2", "service")


async def embed(texts, *, is_query: bool, bulk: bool = False) -> np.ndarray:
    """Deterministic unit vectors per text (the Embedder's contract, DIM wide)."""
    out = []
    for t in texts:
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def service(pool, writer, **settings) -> DocumentService:
    model = get_settings().embed.model
    return DocumentService(
        pool,
        writer,
        embed,
        lambda: load_tokenizer(model),
        DocumentSettings(**settings),
        sizes_for(256, 512, 50, 8000),
    )


@pytest.fixture
async def writer(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return GuardedWriter(pool, "test")


@pytest.fixture
async def docs(pool, writer):
    return service(pool, writer, embed_batch=3)


def handbook(version: str, paragraphs: int = 6, **kw) -> DocumentInput:
    body = "\n\n".join(
        f"## Part {i}\n\n{version} rule {i}: " + "words " * 120 for i in range(paragraphs)
    )
    return DocumentInput(
        document_id="handbook",
        title="Handbook",
        text=f"# Handbook\n\n{body}",
        content_type="text/markdown",
        tags=["hr"],
        metadata={"dept": "hr"},
        **kw,
    )


async def chunk_rows(pool, tenant="t1", document_id="handbook"):
    async with pool.connection() as c:
        cur = await c.execute(
            "SELECT i.id, i.content, i.owner, i.type, i.source, i.scope, i.user_id, i.tags,"
            " i.metadata, i.data, i.pinned, i.profile_class, v.item_id IS NOT NULL AS has_vector"
            " FROM memory_items i LEFT JOIN memory_vectors_test v ON v.item_id = i.id"
            " WHERE i.tenant_id = %s AND i.data->>'document_id' = %s"
            " ORDER BY (i.data->>'chunk_index')::int",
            (tenant, document_id),
        )
        return await cur.fetchall()


async def test_ingest_writes_chunk_rows_and_head(pool, docs):
    head = await docs.ingest(SERVICE, handbook("v1"))
    assert head.version == 1 and head.scope == "org" and head.owner == "@org"
    rows = await chunk_rows(pool)
    assert len(rows) == head.chunk_count >= 6
    for n, r in enumerate(rows):
        assert r["type"] == "document_chunk" and r["source"] == "document"
        assert r["owner"] == "@org" and r["scope"] == "org" and r["user_id"] is None
        assert r["tags"] == ["hr"] and r["metadata"] == {"dept": "hr"}
        assert r["has_vector"] and r["pinned"] is False and r["profile_class"] is None
        d = r["data"]
        assert d["document_id"] == "handbook" and d["version"] == 1 and d["chunk_index"] == n
        assert d["title"] == "Handbook" and d["heading_path"][0] == "Handbook"
        assert 0 <= d["char_start"] < d["char_end"]
    got = await docs.get(ALICE, "handbook")  # a user key reads its tenant's org knowledge
    DocumentDetail.model_validate(got)  # the route's response shape
    assert isinstance(head, DocumentOut)
    assert [c["chunk_index"] for c in got["chunks"]] == list(range(len(rows)))
    assert got["chunks"][0]["heading_path"] == ["Handbook", "Part 0"]


async def test_repost_swaps_versions_atomically_and_keeps_history(pool, docs):
    await docs.ingest(SERVICE, handbook("v1"))
    seen: list[set[int]] = []
    stop = asyncio.Event()

    async def reader():
        while not stop.is_set():
            rows = await chunk_rows(pool)
            seen.append({r["data"]["version"] for r in rows})
            await asyncio.sleep(0)

    task = asyncio.create_task(reader())
    try:
        for _ in range(3):
            head = await docs.ingest(SERVICE, handbook("v2", paragraphs=4))
    finally:
        stop.set()
        await task
    assert head.version == 4
    assert seen and all(len(s) == 1 for s in seen), seen  # never a mix of versions
    rows = await chunk_rows(pool)
    assert {r["data"]["version"] for r in rows} == {4} and len(rows) == head.chunk_count
    versions = await docs.store.versions("t1", "handbook")
    assert [v["version"] for v in versions] == [1, 2, 3, 4]
    assert all(v["replaced_at"] is not None for v in versions[:-1])
    assert versions[-1]["replaced_at"] is None
    async with pool.connection() as c:
        vecs = await (await c.execute("SELECT count(*) AS n FROM memory_vectors_test")).fetchone()
    assert vecs["n"] == len(rows)  # the old versions' vectors went with their chunks


async def test_who_may_write_and_read(pool, docs):
    with pytest.raises(ApiError) as org_by_user:
        await docs.ingest(ALICE, handbook("v1"))
    assert org_by_user.value.status == 403
    await docs.ingest(SERVICE, handbook("v1"))
    mine = DocumentInput(document_id="notes", text="Alice's notes.", scope="user")
    head = await docs.ingest(ALICE, mine)
    assert head.owner == "alice" and head.user_id == "alice"
    agent = DocumentInput(document_id="manual", text="Agent manual.", scope="agent", agent_id="bot")
    await docs.ingest(SERVICE, agent)
    for caller, doc_id in (
        (BOB, "notes"),
        (OTHER, "notes"),
        (OTHER, "handbook"),
        (ALICE, "manual"),
    ):
        with pytest.raises(ApiError) as hidden:
            await docs.get(caller, doc_id)
        assert hidden.value.status == 404, (caller, doc_id)
    assert (await docs.get(ALICE, "manual", agent_id="bot"))["document"]["scope"] == "agent"
    listed = await docs.list(ALICE)
    assert {d["document_id"] for d in listed["documents"]} == {"handbook", "notes"}
    listed = await docs.list(ALICE, agent_id="bot")
    assert {d["document_id"] for d in listed["documents"]} == {"handbook", "notes", "manual"}
    assert {d["document_id"] for d in (await docs.list(BOB))["documents"]} == {"handbook"}
    assert (await docs.list(OTHER))["documents"] == []
    assert {d["document_id"] for d in (await docs.list(SERVICE, tag="hr"))["documents"]} == {
        "handbook"
    }
    with pytest.raises(ApiError) as bob_takes:  # another user's id: taken, not readable
        await docs.ingest(BOB, DocumentInput(document_id="notes", text="x", scope="user"))
    assert bob_takes.value.status == 409
    with pytest.raises(ApiError) as user_deletes_org:
        await docs.delete(ALICE, "handbook")
    assert user_deletes_org.value.status == 403
    with pytest.raises(ApiError) as other_deletes:
        await docs.delete(OTHER, "handbook")
    assert other_deletes.value.status == 404
    assert (await docs.get(SERVICE, "notes"))["document"]["owner"] == "alice"


async def test_paging(pool, docs):
    await docs.ingest(SERVICE, handbook("v1"))
    for i in range(3):
        await docs.ingest(SERVICE, DocumentInput(document_id=f"d{i}", text=f"doc {i}"))
    first = await docs.list(SERVICE, limit=2)
    second = await docs.list(SERVICE, limit=2, cursor=first["next_cursor"])
    ids = [d["document_id"] for d in first["documents"] + second["documents"]]
    assert len(ids) == 4 == len(set(ids)) and second["next_cursor"] is None
    page = await docs.get(SERVICE, "handbook", limit=2)
    rest = await docs.get(SERVICE, "handbook", after=int(page["next_cursor"]), limit=100)
    assert [c["chunk_index"] for c in page["chunks"] + rest["chunks"]] == list(
        range(page["document"]["chunk_count"])
    )


async def test_chunks_count_against_quotas_and_a_refused_repost_changes_nothing(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    docs = service(pool, GuardedWriter(pool, "test", memory_quota=quota.Quota(None, 8)))
    first = await docs.ingest(SERVICE, handbook("v1", paragraphs=3))
    assert first.chunk_count <= 8
    with pytest.raises(ApiError) as over:
        await docs.ingest(SERVICE, handbook("v2", paragraphs=12))
    assert over.value.status == 403
    rows = await chunk_rows(pool)
    assert {r["data"]["version"] for r in rows} == {1} and len(rows) == first.chunk_count
    assert (await docs.store.head("t1", "handbook"))["version"] == 1


async def test_bad_input_changes_nothing(pool, docs):
    await docs.ingest(SERVICE, handbook("v1"))
    bad = DocumentInput(
        document_id="handbook", data=b"%PDF-1.4 broken", content_type="application/pdf"
    )
    with pytest.raises(ApiError) as exc:
        await docs.ingest(SERVICE, bad)
    assert exc.value.status == 422
    small = service(pool, docs.writer, max_chunks=2)
    with pytest.raises(ApiError) as big:
        await small.ingest(SERVICE, handbook("v2"))
    assert big.value.status == 413
    assert (await docs.store.head("t1", "handbook"))["version"] == 1


async def test_delete_and_forget_remove_documents(pool, docs):
    await docs.ingest(SERVICE, handbook("v1"))
    await docs.ingest(
        ALICE, DocumentInput(document_id="notes", text="Alice's notes.", scope="user")
    )
    gone = await docs.delete(SERVICE, "handbook")
    assert gone["deleted"] and gone["chunks"] > 0
    assert await chunk_rows(pool) == [] and await docs.store.versions("t1", "handbook") == []
    forget = ForgetStore(pool, "test")
    counts = await forget.forget(Scope("t1", "alice"))
    assert counts["documents"] == 1 and counts["memories"] == 1
    assert await docs.store.head("t1", "notes") is None
    await docs.ingest(SERVICE, handbook("v1"))
    await docs.ingest(
        SERVICE, DocumentInput(document_id="m", text="manual", scope="agent", agent_id="bot")
    )
    await docs.writer.delete_scope(Owner("t1", None), agent_id="bot")  # erase the agent
    assert await docs.store.head("t1", "m") is None
    counts = await forget.forget(Scope("t1", None))  # the whole tenant
    assert counts["documents"] == 1 and await chunk_rows(pool) == []


async def test_a_chunk_is_not_changed_or_deleted_as_a_memory(pool, docs, writer):
    """The memory update and delete (``PATCH``/``DELETE /v1/memories/{id}``, mem0's) do
    not change or take one chunk out of a document (its head would describe chunks that
    are not there): they answer not found, and the chunk is as it was cut."""
    head = await docs.ingest(SERVICE, handbook("v1"))
    first = (await chunk_rows(pool))[0]
    shared = Owner("t1", None)
    assert await writer.delete(shared, first["id"], actor="test") is False
    changed = await writer.update(
        shared, first["id"], {"content": "rewritten"}, (await embed(["x"], is_query=False))[0]
    )
    assert changed is None
    rows = await chunk_rows(pool)
    assert len(rows) == head.chunk_count and rows[0]["content"] == first["content"]


async def test_a_users_scope_delete_takes_their_documents_whole(pool, docs, writer):
    """Deleting all of a user's memories (``DELETE /v1/memories?user_id=``, mem0's
    ``delete_all``) takes their documents' chunks, so their heads go too (none is left
    counting chunks that are gone); a delete narrowed to an agent or a session leaves them."""
    note = DocumentInput(document_id="notes", text="Alice's notes.", scope="user")
    await docs.ingest(ALICE, note)
    await docs.ingest(SERVICE, handbook("v1"))
    alice = Owner("t1", "alice")
    assert await writer.delete_scope(alice, agent_id="bot") == 0
    assert await writer.delete_scope(alice, session_id="s1") == 0
    assert (await docs.store.head("t1", "notes"))["chunk_count"] == 1
    assert await writer.delete_scope(alice) == 1
    assert await docs.store.head("t1", "notes") is None
    assert await docs.store.versions("t1", "notes") == []
    assert (await docs.store.head("t1", "handbook"))["chunk_count"] == len(await chunk_rows(pool))


async def test_a_restored_document_is_embedded_in_the_bulk_lane(pool, writer):
    """An import's documents (and any post) ask the Embedder for its bulk lane."""
    lanes: list[bool] = []

    async def recording(texts, *, is_query: bool, bulk: bool = False) -> np.ndarray:
        lanes.append(bulk)
        return await embed(texts, is_query=is_query)

    docs = service(pool, writer, embed_batch=3)
    docs.embed = recording
    await docs.ingest(SERVICE, handbook("v1"))
    assert len(lanes) >= 2 and all(lanes)  # embed_batch 3 of >= 6 chunks: >= 2 calls
    lanes.clear()
    exported = ExportedDocument.model_validate(
        {
            "document_id": "restored",
            "title": "Notes",
            "chunks": [
                {
                    "chunk_index": i,
                    "content": f"note {i}",
                    "char_start": 7 * i,
                    "char_end": 7 * i + 6,
                }
                for i in range(4)
            ],
        }
    )
    out = await docs.restore(Owner("t1", "alice"), exported, "import")
    assert out.document_id == "restored" and lanes and all(lanes)
