"""POST /v1/documents answered 202 with a job, and GET /v1/documents/jobs/{id}, through
the composition root without Ray (real Postgres, the real ONNX encoder, the routes over
an in-process ASGI transport); the job is run by the Extractor's worker class."""

from __future__ import annotations

import pytest

from serve_app.api.documents import prefers_async
from serve_app.bootstrap import bootstrap
from serve_app.services.document_jobs import DocumentJobWorker
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api, user_key
from serve_app.testing.pdfs import text_pdf

KEY = "msk_document_jobs_test_key_0123456789"
ADMIN = "msk_document_jobs_admin_key_0123456789"
GUIDE = (
    "# Guide\n\n## Hotels\n\nCap 180 euros.\n\n## Meals\n\nDinner up to 40.\n\n## Taxis\n\nOk.\n"
)


@pytest.fixture
async def stack(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN).with_(
        documents={"sync_chunks": 3}
    )
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        yield c, services, DocumentJobWorker(services.documents, settings.documents)


def test_prefer_header_is_read_as_rfc_7240_preferences():
    assert prefers_async("respond-async")
    assert prefers_async("return=minimal, Respond-Async; x=1")
    assert prefers_async("wait=10,respond-async")
    assert not prefers_async(None) and not prefers_async("")
    assert not prefers_async("respond-asynchronously") and not prefers_async("wait=respond-async")


async def test_202_then_done_and_job_reads_are_isolated(stack):
    c, _, worker = stack
    ann, bob = await user_key(c, ADMIN, "ann"), await user_key(c, ADMIN, "bob")
    body = {
        "document_id": "guide",
        "text": GUIDE,
        "content_type": "text/markdown",
        "scope": "user",
        "user_id": "ann",
    }
    r = await c.post("/v1/documents", json=body, headers={"Prefer": "respond-async"})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "queued" and job["document_id"] == "guide"
    assert job["chunk_count"] == 3
    assert r.headers["location"] == f"/v1/documents/jobs/{job['job_id']}"
    assert (await c.get("/v1/documents/guide")).status_code == 404  # not written yet

    assert (await c.get(r.headers["location"], headers=ann)).json()["status"] == "queued"
    assert (await c.get(r.headers["location"], headers=bob)).status_code == 404
    assert (await c.get("/v1/documents/jobs/not-a-uuid")).status_code == 422

    assert await worker.run_once() == 1
    await worker.drain()
    done = (await c.get(r.headers["location"], headers=ann)).json()
    assert (done["status"], done["version"], done["embedded"]) == ("done", 1, 3)
    got = await c.get("/v1/documents/guide", headers=ann)
    assert got.status_code == 200, got.text
    assert [ch["heading_path"][-1] for ch in got.json()["chunks"]] == ["Hotels", "Meals", "Taxis"]
    found = await c.post("/v1/search", json={"query": "hotel cap in euros", "user_id": "ann"})
    assert any("180 euros" in x["content"] for x in found.json()["results"]), found.text


async def test_over_the_threshold_a_post_is_a_job_without_asking(stack):
    c, _, _ = stack
    more = GUIDE + "\n## Trains\n\nSecond class.\n"  # four sections: over sync_chunks (3)
    r = await c.post("/v1/documents", json={"text": more, "content_type": "text/markdown"})
    assert r.status_code == 202, r.text
    r = await c.post("/v1/documents", json={"text": "one line", "document_id": "short"})
    assert r.status_code == 201 and r.json()["version"] == 1


async def test_a_pdf_upload_asking_for_async_is_a_job(stack):
    c, _, worker = stack
    pages = [f"Page text {n}: the {w} desk." for n, w in enumerate(("gym", "library"))]
    r = await c.post(
        "/v1/documents",
        files={"file": ("two.pdf", text_pdf(pages), "application/pdf")},
        data={"document_id": "two", "scope": "user", "user_id": "ann", "title": "Two"},
        headers={"Prefer": "respond-async"},
    )
    assert r.status_code == 202, r.text
    assert r.json()["chunk_count"] == 2
    await worker.run_once()
    await worker.drain()
    job = (await c.get(r.headers["location"])).json()
    assert job["status"] == "done", job
    got = (await c.get("/v1/documents/two", params={"user_id": "ann"})).json()
    assert [ch["heading_path"] for ch in got["chunks"]] == [["Page 1"], ["Page 2"]]
    assert got["document"]["title"] == "Two" and got["chunks"][1]["content"] == pages[1]


async def test_cancel_a_job_writes_nothing_and_checks_who_asks(stack):
    c, _, worker = stack
    ann, bob = await user_key(c, ADMIN, "ann"), await user_key(c, ADMIN, "bob")
    body = {
        "document_id": "mine",
        "text": GUIDE,
        "content_type": "text/markdown",
        "scope": "user",
        "user_id": "ann",
    }
    mine = await c.post("/v1/documents", json=body, headers={"Prefer": "respond-async"})
    org_body = {"document_id": "org", "text": GUIDE, "content_type": "text/markdown"}
    org = await c.post("/v1/documents", json=org_body, headers={"Prefer": "respond-async"})
    assert mine.status_code == org.status_code == 202
    where, org_at = mine.headers["location"], org.headers["location"]

    assert (await c.delete(where, headers=bob)).status_code == 404  # not bob's to see
    denied = await c.delete(org_at, headers=ann)  # ann reads org documents, may not write
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    r = await c.delete(where, headers=ann)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled"
    assert (await c.get(where, headers=ann)).json()["status"] == "cancelled"
    again = await c.delete(where, headers=ann)
    assert again.status_code == 409 and "cancelled" in again.json()["error"]["message"]

    assert await worker.run_once() == 1  # only the org job is left to run
    await worker.drain()
    assert (await c.get("/v1/documents/mine", headers=ann)).status_code == 404
    assert (await c.get(org_at)).json()["status"] == "done"
    late = await c.delete(org_at)
    assert late.status_code == 409 and "done" in late.json()["error"]["message"]
    assert (await c.get("/v1/documents/org")).status_code == 200  # untouched by the 409
