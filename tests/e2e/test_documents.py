"""The knowledge base over HTTP through the real service (issue 33): post Markdown, HTML
and a PDF file, list, get chunks, re-post (versions), delete, and isolation."""

from __future__ import annotations

import pytest

from serve_app.client import MemserveClient
from serve_app.client.errors import NotFound
from tests.e2e.conftest import client_for
from tests.serve_app.documents.test_parse_chunking import pdf_bytes

pytestmark = pytest.mark.e2e

GUIDE = (
    "# Travel policy\n\nBook flights through the portal.\n\n"
    "## Hotels\n\nThe nightly cap is 180 euros in Berlin.\n\n"
    "## Meals\n\nDinner is covered up to 40 euros.\n"
)


@pytest.fixture(scope="module")
def clients(service, keys):
    names = ["service", "service_t2", "alice", "bob"]
    cs = {n: client_for(service, getattr(keys, n)) for n in names}
    yield cs
    for c in cs.values():
        c.close()


def test_post_list_get_repost_delete(clients, service, keys):
    svc, alice = clients["service"], clients["alice"]
    r = svc.post(
        "/v1/documents",
        json={
            "document_id": "e2e-travel",
            "text": GUIDE,
            "content_type": "text/markdown",
            "tags": ["policy"],
            "source_url": "https://intranet.example/travel",
        },
    )
    assert r.status_code == 201, r.text
    head = r.json()
    assert head["version"] == 1 and head["scope"] == "org" and head["chunk_count"] == 3
    assert head["title"] == "Travel policy"

    got = alice.get("/v1/documents/e2e-travel")  # a user key reads org knowledge
    assert got.status_code == 200, got.text
    chunks = got.json()["chunks"]
    assert [c["chunk_index"] for c in chunks] == [0, 1, 2]
    hotel = chunks[1]
    assert hotel["heading_path"] == ["Travel policy", "Hotels"]
    assert GUIDE[hotel["char_start"] : hotel["char_end"]] == hotel["content"]
    assert "180 euros" in hotel["content"]

    listed = alice.get("/v1/documents", params={"tag": "policy"}).json()["documents"]
    assert [d["document_id"] for d in listed] == ["e2e-travel"]

    html = (
        "<html><head><title>Travel</title></head><body><h1>Hotels</h1><p>Cap 150.</p></body></html>"
    )
    r = svc.post(
        "/v1/documents",
        json={"document_id": "e2e-travel", "text": html, "content_type": "text/html"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["version"] == 2 and r.json()["chunk_count"] == 1
    chunks = alice.get("/v1/documents/e2e-travel").json()["chunks"]
    assert [c["content"] for c in chunks] == ["Cap 150."]

    with MemserveClient(service.base_url, keys.service) as m:  # a PDF through the client
        up = m.upload_document(
            pdf_bytes(["Refunds take five days."]),
            filename="refunds.pdf",
            document_id="e2e-refunds",
            tags=["policy", "billing"],
        )
        assert up.chunk_count == 1 and up.content_type == "application/pdf"
        detail = m.document("e2e-refunds")
        assert detail.chunks[0].content == "Refunds take five days."
        assert detail.chunks[0].heading_path == ["Page 1"]
        bad = svc.post(
            "/v1/documents", files={"file": ("x.pdf", b"%PDF-1.4 junk", "application/pdf")}
        )
        assert bad.status_code == 422, bad.text
        gone = m.delete_document("e2e-refunds")
        assert gone.deleted and gone.chunks == 1
        with pytest.raises(NotFound):
            m.document("e2e-refunds")

    assert svc.delete("/v1/documents/e2e-travel").status_code == 200
    assert alice.get("/v1/documents/e2e-travel").status_code == 404


def test_isolation(clients):
    svc, alice, bob, other = (clients[n] for n in ("service", "alice", "bob", "service_t2"))
    r = alice.post("/v1/documents", json={"document_id": "e2e-org", "text": "x", "scope": "org"})
    assert r.status_code == 403, r.text
    r = alice.post(
        "/v1/documents", json={"document_id": "e2e-mine", "text": "Alice's plan.", "scope": "user"}
    )
    assert r.status_code == 201, r.text
    r = svc.post("/v1/documents", json={"document_id": "e2e-shared", "text": "Shared."})
    assert r.status_code == 201, r.text
    for doc in ("e2e-shared", "e2e-mine"):
        assert other.get(f"/v1/documents/{doc}").status_code == 404  # another tenant
        assert other.delete(f"/v1/documents/{doc}").status_code == 404
    assert bob.get("/v1/documents/e2e-mine").status_code == 404  # another user
    assert bob.delete("/v1/documents/e2e-shared").status_code == 403
    assert "e2e-mine" not in {
        d["document_id"] for d in bob.get("/v1/documents").json()["documents"]
    }
    assert svc.delete("/v1/documents/e2e-shared").status_code == 200
    assert alice.delete("/v1/documents/e2e-mine").status_code == 200
