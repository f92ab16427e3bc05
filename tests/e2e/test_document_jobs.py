"""A big document as a job through the real service over HTTP (issue 33): a generated
multi-page PDF posted with ``Prefer: respond-async`` is answered 202 once stored, the
Extractor's worker embeds and writes it, the job reads ``done`` and the pages come
back as cited chunks; another tenant's key cannot see the job."""

from __future__ import annotations

import time

import pytest

from serve_app.client import MemserveClient
from serve_app.schemas.documents import DocumentJob
from serve_app.testing.pdfs import text_pdf
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e

TOPICS = (
    "forklift",
    "parking",
    "holiday",
    "payroll",
    "canteen",
    "badge",
    "printer",
    "laptop",
    "shuttle",
    "gym",
    "library",
    "mailroom",
)
PAGES = [f"Quorvex {t} rule: the {t} desk is on floor {n + 2}." for n, t in enumerate(TOPICS)]
DONE_WITHIN_S = 120.0  # a deadline for the poll, not a speed assertion


def wait_done(client, location: str) -> dict:
    deadline = time.monotonic() + DONE_WITHIN_S
    while True:
        r = client.get(location)
        assert r.status_code == 200, r.text
        job = r.json()
        if job["status"] in ("done", "failed") or time.monotonic() > deadline:
            return job
        time.sleep(0.25)


def test_a_pdf_posted_async_is_202_then_done_with_cited_chunks(service, keys, uid):
    with client_for(service, keys.service) as svc:
        r = svc.post(
            "/v1/documents",
            files={"file": ("depots.pdf", text_pdf(PAGES), "application/pdf")},
            data={
                "document_id": f"depots-{uid}",
                "scope": "user",
                "user_id": uid,
                "title": "Quorvex depots",
            },
            headers={"Prefer": "respond-async"},
        )
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["status"] == "queued" and accepted["chunk_count"] == len(PAGES)
        assert accepted["document_id"] == f"depots-{uid}"
        location = r.headers["location"]
        assert location == f"/v1/documents/jobs/{accepted['job_id']}"

        with client_for(service, keys.service_t2) as other:  # another tenant: missing
            assert other.get(location).status_code == 404

        job = wait_done(svc, location)
        assert job["status"] == "done", job
        assert job["version"] == 1 and job["embedded"] == len(PAGES)

        got = svc.get(f"/v1/documents/depots-{uid}", params={"user_id": uid}).json()
        assert [c["heading_path"] for c in got["chunks"]] == [[f"Page {n + 1}"] for n in range(12)]
        assert got["chunks"][7]["content"] == PAGES[7]

        q = "Which floor is the Quorvex shuttle desk on?"
        hits = svc.post("/v1/search", json={"query": q, "user_id": uid}).json()["results"]
        chunks = [h for h in hits if h["type"] == "document_chunk"]
        assert chunks and "shuttle desk is on floor 10" in chunks[0]["content"], hits
        cite = chunks[0]["citation"]
        assert cite["document_id"] == f"depots-{uid}" and cite["title"] == "Quorvex depots"
        assert cite["heading_path"] == ["Page 9"] and cite["chunk_index"] == 8

    with MemserveClient(service.base_url, keys.service) as m:  # the client's side of it
        two = text_pdf(PAGES[:2])
        job = m.upload_document(
            two,
            filename="two.pdf",
            scope="user",
            user_id=uid,
            document_id=f"two-{uid}",
            respond_async=True,
        )
        assert isinstance(job, DocumentJob) and job.chunk_count == 2
        deadline = time.monotonic() + DONE_WITHIN_S
        while m.document_job(job.job_id).status not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.25)
        assert m.document_job(job.job_id).status == "done"
