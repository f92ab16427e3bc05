"""A posted document comes back as a cited chunk in search and in the context block,
through the real service over HTTP (issue 33), for users of its tenant only."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e

GUIDE = (
    "# Zorblat travel policy\n\nBook flights through the Zorblat portal.\n\n"
    "## Hotels\n\nThe nightly Zorblat hotel cap is 180 euros in Berlin.\n\n"
    "## Meals\n\nZorblat dinners are covered up to 40 euros.\n"
)
HOTEL_Q = "What is the Zorblat hotel cap per night in Berlin?"


@pytest.fixture(scope="module")
def posted(service, keys):
    doc = "e2e-kb-" + uuid.uuid4().hex[:8]
    with client_for(service, keys.service) as svc:
        r = svc.post(
            "/v1/documents",
            json={
                "document_id": doc,
                "title": "Zorblat travel policy",
                "text": GUIDE,
                "content_type": "text/markdown",
                "tags": ["zorblat"],
                "source_url": "https://intranet.example/zorblat",
            },
        )
        assert r.status_code == 201, r.text
    yield doc
    with client_for(service, keys.service) as svc:  # the shared tenant's org stays as found
        assert svc.delete(f"/v1/documents/{doc}").status_code == 200


def test_posted_document_is_a_cited_chunk_in_search_and_context(service, keys, posted):
    with client_for(service, keys.alice) as alice:
        r = alice.post("/v1/search", json={"query": HOTEL_Q, "explain": True})
        assert r.status_code == 200, r.text
        hits = [h for h in r.json()["results"] if h["type"] == "document_chunk"]
        assert hits and "180 euros" in hits[0]["content"]
        c = hits[0]["citation"]
        assert c["document_id"] == posted and c["title"] == "Zorblat travel policy"
        assert c["heading_path"][-1] == "Hotels" and c["version"] == 1
        assert c["source_url"] == "https://intranet.example/zorblat"
        assert isinstance(c["chunk_index"], int)
        assert hits[0]["explain"]["source"] == "knowledge"
        only = alice.post(
            "/v1/search", json={"query": HOTEL_Q, "document_ids": [posted], "threshold": -1.0}
        ).json()["results"]
        assert only and {h["citation"]["document_id"] for h in only} == {posted}

        r = alice.post("/v1/context", json={"query": HOTEL_Q})
        assert r.status_code == 200, r.text
        body = r.json()
        assert "From the knowledge base:" in body["context"]
        assert "[Zorblat travel policy › Hotels]" in body["context"]
        assert any(k["citation"]["document_id"] == posted for k in body["knowledge"])
        assert body["knowledge_tokens"] > 0


def test_another_tenant_never_sees_the_document(service, keys, posted):
    with client_for(service, keys.alice_t2) as other:
        r = other.post("/v1/search", json={"query": HOTEL_Q, "threshold": -1.0, "top_k": 50})
        assert r.status_code == 200, r.text
        assert not [h for h in r.json()["results"] if "Zorblat" in h["content"]]
        ctx = other.post("/v1/context", json={"query": HOTEL_Q}).json()
        assert "Zorblat" not in ctx["context"] and ctx["knowledge"] == []
