"""/v1/documents through the composition root without Ray (real Postgres, the real ONNX
encoder, the HTTP routes over an in-process ASGI transport): multipart uploads, bounds,
chunks out of the memory listings, and export/import carrying a user's documents."""

from __future__ import annotations

import json

import pytest

from serve_app.auth import Principal
from serve_app.bootstrap import bootstrap
from serve_app.errors import ApiError
from serve_app.schemas.documents import DocumentInput
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api
from serve_app.testing.pdfs import surrogate_pdf, xobject_bomb
from tests.serve_app.documents.test_parse_chunking import pdf_bytes

KEY = "msk_documents_test_key_0123456789"
NOTES = "# Trip\n\n## Hotel\n\nThe Adlon, room 301.\n\n## Train\n\nICE 1003 at 09:30.\n"


@pytest.fixture
async def stack(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    settings = settings.with_(documents={"max_bytes": 4096, "max_pdf_pages": 2})
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        yield c, services


async def test_uploads_bounds_and_listings(stack):
    c, _ = stack
    r = await c.post(
        "/v1/documents",
        files={"file": ("faq.pdf", pdf_bytes(["Refunds take five days."]), "application/pdf")},
        data={"document_id": "faq", "tags": "billing,policy", "metadata": '{"v": 1}'},
    )
    assert r.status_code == 201, r.text
    assert r.json()["content_type"] == "application/pdf" and r.json()["tags"] == [
        "billing",
        "policy",
    ]
    md = await c.post(
        "/v1/documents",
        files={"file": ("notes.md", NOTES.encode(), "text/plain")},
        data={"scope": "user", "user_id": "ann"},
    )
    assert md.status_code == 201, md.text
    assert md.json()["content_type"] == "text/markdown" and md.json()["chunk_count"] == 2
    too_big = await c.post("/v1/documents", files={"file": ("big.txt", b"x " * 4000, "text/plain")})
    assert too_big.status_code == 413, too_big.text
    three = pdf_bytes(["a", "b", "c"])
    pages = await c.post("/v1/documents", files={"file": ("p.pdf", three, "application/pdf")})
    assert pages.status_code == 413, pages.text
    locked = pdf_bytes(["x"], password="pw")
    enc = await c.post("/v1/documents", files={"file": ("l.pdf", locked, "application/pdf")})
    assert enc.status_code == 422 and "encrypted" in enc.text
    bad = await c.post("/v1/documents", json={"text": "x", "scope": "agent"})
    assert bad.status_code == 422, bad.text
    # chunks are knowledge, not memories: not in the memory listings
    listed = await c.get("/v1/memories", params={"user_id": "ann"})
    assert listed.status_code == 200 and listed.json()["memories"] == []
    assert (await c.get("/v1/memories")).json()["memories"] == []
    docs = (await c.get("/v1/documents", params={"user_id": "ann"})).json()["documents"]
    assert [d["document_id"] for d in docs] == [md.json()["document_id"]]


async def test_export_import_carries_a_users_documents(stack):
    c, _ = stack
    r = await c.post(
        "/v1/documents",
        json={
            "document_id": "trip",
            "text": NOTES,
            "content_type": "text/markdown",
            "scope": "user",
            "user_id": "ann",
            "tags": ["travel"],
        },
    )
    assert r.status_code == 201, r.text
    await c.post("/v1/documents", json={"document_id": "org-doc", "text": "Shared."})
    export = await c.get("/v1/export", params={"user_id": "ann"})
    records = [json.loads(x) for x in export.text.splitlines()]
    docs = [x for x in records if x["kind"] == "document"]
    assert [d["document_id"] for d in docs] == ["trip"]  # the user's own, not the org's
    assert [ch["content"] for ch in docs[0]["chunks"]] == [
        "The Adlon, room 301.",
        "ICE 1003 at 09:30.",
    ]
    assert records[-1]["documents"] == 1
    taken = await c.post("/v1/import", params={"user_id": "ben"}, content=export.text)
    assert taken.status_code == 409, taken.text  # ids are per tenant: "trip" is ann's
    assert (await c.get("/v1/export", params={"user_id": "ben"})).text.count('"kind":"memory"') == 0
    assert (await c.delete("/v1/documents/trip")).status_code == 200
    r = await c.post("/v1/import", params={"user_id": "ben"}, content=export.text)
    assert r.status_code == 200, r.text
    assert r.json()["imported"]["documents"] == 1
    got = (await c.get("/v1/documents/trip")).json()
    assert got["document"]["owner"] == "ben" and got["document"]["tags"] == ["travel"]
    assert [ch["heading_path"] for ch in got["chunks"]] == [["Trip", "Hotel"], ["Trip", "Train"]]


@pytest.fixture
async def hostile(fresh_db, encoder):
    """Parse limits small enough for a test: 1 s of CPU, one rate unit per 0.25 s."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    settings = settings.with_(documents={"parse_cpu_s": 1, "parse_unit_cpu_s": 0.25})
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        yield c, services


async def _nothing_stored(c) -> None:
    assert (await c.get("/v1/documents")).json()["documents"] == []


async def test_multipart_metadata_deeply_nested_or_with_a_lone_surrogate_is_422(hostile):
    c, _ = hostile
    pdf = ("faq.pdf", pdf_bytes(["Refunds take five days."]), "application/pdf")
    for metadata in (
        '{"a": ' * 5000 + "1" + "}" * 5000,  # past json.loads' recursion: was a 500
        '{"a": ' * 65 + "1" + "}" * 65,  # past the input guard's depth
        '{"note": "\\ud800"}',  # an escaped lone surrogate: PostgreSQL cannot store it
        '{"\\udfff": 1}',
    ):
        r = await c.post("/v1/documents", files={"file": pdf}, data={"metadata": metadata})
        assert r.status_code == 422, (metadata[:20], r.text)
        assert r.json()["error"]["code"] == "invalid_request" and "metadata" in r.text
    await _nothing_stored(c)
    ok = await c.post("/v1/documents", files={"file": pdf}, data={"metadata": '{"a": {"b": 1}}'})
    assert ok.status_code == 201 and ok.json()["metadata"] == {"a": {"b": 1}}, ok.text


async def test_a_pdf_glyph_mapped_to_a_lone_surrogate_is_stored_as_a_replacement(hostile):
    c, _ = hostile
    r = await c.post(
        "/v1/documents",
        files={"file": ("s.pdf", surrogate_pdf("Refunds take five days"), "application/pdf")},
        data={"document_id": "s"},
    )
    assert r.status_code == 201, r.text  # was a 500 from the database's UTF-8 encoding
    assert r.json()["chars"] == len("Refunds take five days\ufffd")  # the glyph kept, as U+FFFD
    chunks = (await c.get("/v1/documents/s")).json()["chunks"]
    assert [ch["content"].rstrip("\ufffd") for ch in chunks] == ["Refunds take five days"]


async def test_a_pdf_bomb_is_killed_at_its_limit_charged_by_its_cpu_and_stores_nothing(hostile):
    """Nested form XObjects (an hour of pypdf): 413 naming the CPU limit, the parse
    charged as its whole second (4 units), not one unit per upload; the replica keeps
    serving; an honest PDF costs its own CPU time plus its chunks."""
    c, services = hostile
    r = await c.post(
        "/v1/documents",
        files={"file": ("bomb.pdf", xobject_bomb(), "application/pdf")},
        data={"document_id": "bomb"},
    )
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "payload_too_large"
    assert "MEMSERVE_DOC_PARSE_CPU_S" in r.json()["error"]["message"]
    assert (await c.get("/v1/documents/bomb")).status_code == 404
    await _nothing_stored(c)
    caller = Principal("k", "default", "service")
    spent: list[float] = []
    bomb = DocumentInput(data=xobject_bomb(), content_type="application/pdf")
    with pytest.raises(ApiError) as refused:
        await services.documents.ingest(caller, bomb, charge=spent.append)
    assert refused.value.status == 413 and spent == [4.0]
    spent.clear()
    honest = DocumentInput(
        data=pdf_bytes(["Refunds take five days."]), content_type="application/pdf"
    )
    await services.documents.ingest(caller, honest, charge=spent.append)
    assert len(spent) == 2 and 1.0 <= spent[0] <= 4.0 and spent[1] == 1.0  # parse, 1 chunk
    assert (await c.get("/healthz")).status_code == 200
