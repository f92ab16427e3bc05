"""mem0 document messages on /mem0 add: pdf_url, mdx_url, txt_url (URL, data URL or
base64) become knowledge-base documents; image messages are a 422 naming the missing
vision model; a URL to a private address is refused and writes nothing. In-process over
real Postgres, the real encoder and a real HTTP document server on loopback (allowed
here through ``MEMSERVE_FETCH_ALLOWED_NETWORKS``; the default refuses it)."""

from __future__ import annotations

import base64

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.document_server import DocumentServer
from serve_app.testing.inprocess import in_process_api, user_key
from serve_app.testing.pdfs import text_pdf

KEY = "msk_mem0_documents_service_0123456789"
ADMIN = "msk_mem0_documents_admin_0123456789"
ADD = "/mem0/v3/memories/add/"
MD = b"# Returns\n\nRefunds take five working days.\n\n## Shipping\n\nFree over fifty euros.\n"


@pytest.fixture
def server():
    s = DocumentServer(  # 127.0.0.2: allowed below, while 127.0.0.1 stays refused
        host="127.0.0.2",
        files={
            "/policy.pdf": ("application/pdf", text_pdf(["Refunds take five days.", "Page 2."])),
            "/guide.md": ("text/markdown", MD),
        },
    ).start()
    yield s
    s.stop()


@pytest.fixture
async def api(fresh_db, encoder, server):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN).with_(
        fetch={"allowed_networks": [f"{server.host}/32"]}
    )
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        yield c, services


def doc(kind: str, url: str, role: str = "user") -> dict:
    return {"role": role, "content": {"type": kind, kind: {"url": url}}}


async def documents(c, **params) -> list[dict]:
    r = await c.get("/v1/documents", params=params)
    assert r.status_code == 200, r.text
    return r.json()["documents"]


async def test_pdf_and_markdown_by_url_become_the_users_documents(api, server):
    c, _ = api
    body = {
        "user_id": "ann",
        "messages": [
            doc("pdf_url", server.url("/policy.pdf")),
            doc("mdx_url", server.url("/guide.md")),
        ],
    }
    r = await c.post(ADD, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "SUCCEEDED" and [x["event"] for x in out["results"]] == ["ADD"] * 2
    pdf, md = (x["document"] for x in out["results"])
    assert (pdf["scope"], pdf["user_id"], pdf["content_type"]) == ("user", "ann", "application/pdf")
    assert pdf["source_url"] == server.url("/policy.pdf") and pdf["chunk_count"] >= 1
    assert md["content_type"] == "text/markdown" and out["results"][1]["id"] == md["document_id"]

    got = await c.get(f"/v1/documents/{pdf['document_id']}")
    assert got.status_code == 200, got.text
    assert "Refunds take five days." in " ".join(ch["content"] for ch in got.json()["chunks"])
    chunks = (await c.get(f"/v1/documents/{md['document_id']}")).json()["chunks"]
    assert any(ch["heading_path"][-1:] == ["Shipping"] for ch in chunks), chunks

    again = await c.post(ADD, json={"user_id": "ann", "messages": [body["messages"][1]]})
    assert again.json()["results"][0]["event"] == "UPDATE"  # same URL, same owner: version 2
    assert again.json()["results"][0]["document"]["version"] == 2
    other = await c.post(ADD, json={"user_id": "bob", "messages": [body["messages"][1]]})
    assert other.json()["results"][0]["id"] != md["document_id"]  # bob's own document
    assert {d["user_id"] for d in await documents(c, scope="user")} == {"ann", "bob"}


async def test_inline_documents_and_mixed_messages(api):
    c, _ = api
    b64 = base64.b64encode(MD).decode()
    data_url = "data:application/pdf;base64," + base64.b64encode(text_pdf(["Inline."])).decode()
    body = {
        "user_id": "ann",
        "infer": False,
        "messages": [
            {"role": "user", "content": "I prefer email to phone calls"},
            doc("mdx_url", b64),
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and this file:"},
                    {"type": "pdf_url", "pdf_url": {"url": data_url}},
                ],
            },
            doc("txt_url", "data:,plain%20text%20notes"),
        ],
    }
    r = await c.post(ADD, json=body)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    kinds = [x["document"]["content_type"] if x.get("document") else "memory" for x in results]
    assert kinds == ["text/markdown", "application/pdf", "text/plain", "memory", "memory"]
    assert [x["memory"] for x in results[3:]] == ["I prefer email to phone calls", "and this file:"]
    assert all(x["document"]["source_url"] is None for x in results[:3])


async def test_a_service_key_naming_an_agent_or_no_one_writes_shared_knowledge(api):
    c, _ = api
    b64 = base64.b64encode(MD).decode()
    r = await c.post(ADD, json={"agent_id": "support", "messages": [doc("mdx_url", b64)]})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["document"]["scope"] == "agent"
    assert r.json()["results"][0]["document"]["agent_id"] == "support"
    r = await c.post(ADD, json={"messages": [doc("txt_url", b64)]})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["document"]["scope"] == "org"


async def test_a_user_key_adds_to_its_own_scope_only(api):
    c, _ = api
    r = await c.post(
        "/v1/admin/keys",
        json={"role": "user", "user_id": "cy"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 201, r.text
    user = {"Authorization": f"Bearer {r.json()['key']}"}
    b64 = base64.b64encode(MD).decode()
    r = await c.post(ADD, json={"messages": [doc("mdx_url", b64)]}, headers=user)
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["document"]["user_id"] == "cy"
    r = await c.post(ADD, json={"user_id": "ann", "messages": [doc("mdx_url", b64)]}, headers=user)
    assert r.status_code == 403, r.text


async def test_a_refused_caller_costs_no_fetch(api, server):
    """Rights first: a user key naming another user gets its 403 before any URL is read
    (was: every part fetched and held, then 403)."""
    c, _ = api
    cy = await user_key(c, ADMIN, "cy")
    urls = [doc("pdf_url", server.url(f"/policy.pdf?n={i}")) for i in range(5)]
    r = await c.post(ADD, json={"user_id": "ann", "messages": urls}, headers=cy)
    assert r.status_code == 403, r.text
    assert server.hits == []


async def test_too_many_document_parts_is_a_413_before_any_fetch(api, server):
    c, services = api
    cap = services.settings.fetch.max_document_parts
    urls = [doc("pdf_url", server.url(f"/policy.pdf?n={i}")) for i in range(cap + 1)]
    r = await c.post(ADD, json={"user_id": "ann", "messages": urls})
    assert r.status_code == 413, r.text
    assert server.hits == [] and await documents(c) == []
    r = await c.post(ADD, json={"user_id": "ann", "messages": urls[:cap]})
    assert r.status_code == 200, r.text
    assert len(server.hits) == cap


async def test_documents_held_across_requests_fit_the_replicas_byte_budget(api, server):
    """A fetch that would take the replica past its bytes in flight is a 503 with
    Retry-After, nothing written; the budget is whole again after each request."""
    c, services = api
    fetcher = services.fetcher
    fetcher.budget.total = fetcher.s.max_bytes  # room for one document at a time
    two = [doc("pdf_url", server.url("/policy.pdf")), doc("mdx_url", server.url("/guide.md"))]
    r = await c.post(ADD, json={"user_id": "ann", "messages": [two[0]]})
    assert r.status_code == 200, r.text
    assert fetcher.budget.used == 0
    fetcher.budget.used = 1  # another request holds a byte
    r = await c.post(ADD, json={"user_id": "ann", "messages": [two[1]]})
    assert r.status_code == 503 and r.headers["Retry-After"], r.text
    fetcher.budget.used = 0
    assert len(await documents(c)) == 1


async def test_images_are_a_clear_422_and_write_nothing(api):
    c, _ = api
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    for content in (image, [{"type": "text", "text": "look"}, image]):
        body = {
            "user_id": "ann",
            "infer": False,
            "messages": [
                doc("mdx_url", base64.b64encode(MD).decode()),
                {"role": "user", "content": content},
            ],
        }
        r = await c.post(ADD, json=body)
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "vision_model_required" and "vision model" in err["message"]
    r = await c.post(ADD, json={"user_id": "ann", "messages": [doc("mdx_url", "")]})
    assert r.status_code == 422 and "mdx_url.url" in r.text, r.text
    r = await c.post(ADD, json={"user_id": "ann", "messages": [doc("video_url", "x")]})
    assert r.status_code == 422 and "not supported" in r.text, r.text
    assert await documents(c) == []
    page = await c.post("/mem0/v3/memories/", json={"filters": {"user_id": "ann"}})
    assert page.json()["count"] == 0


async def test_private_urls_are_refused_and_write_nothing(api, server):
    c, _ = api
    good = doc("mdx_url", server.url("/guide.md"))
    for url in (
        "http://127.0.0.1:9/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://2130706433/",
        server.url("/redirect?to=http://169.254.169.254/"),
    ):
        r = await c.post(ADD, json={"user_id": "ann", "messages": [good, doc("pdf_url", url)]})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "url_refused", r.text
    assert await documents(c) == []  # the good document before it was not ingested either


async def test_urls_the_http_client_cannot_parse_are_a_422_not_a_500(api, server):
    c, _ = api
    good = doc("mdx_url", server.url("/guide.md"))
    bad = [
        server.url("/guide\x01.md"),  # a control character
        "http://[::1/jwks",  # a broken IPv6 literal
        "http://64:ff9b::a9fe:a9fe/x",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # NAT64 of the metadata address
        server.url("/redirect?to=http://exa%01mple.com/"),
    ]
    for url in bad:
        r = await c.post(ADD, json={"user_id": "ann", "messages": [good, doc("pdf_url", url)]})
        assert r.status_code == 422, (url, r.text)
        assert r.json()["error"]["code"] in ("url_refused", "fetch_failed"), r.text
    assert await documents(c) == []


async def test_several_documents_are_added_all_or_nothing(fresh_db, encoder):
    """The second document takes the user past the quota: neither is stored (before,
    the first one landed and the add still answered an error)."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN).with_(
        quota={"max_memories_per_user": 6}
    )
    boot = bootstrap(settings, fresh_db)
    big = "\n\n".join(f"## Part {i}\n\n" + f"rule {i} " * 200 for i in range(8)).encode()
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        small = doc("mdx_url", base64.b64encode(MD).decode())  # two chunks: fits alone
        body = {
            "user_id": "ann",
            "messages": [small, doc("mdx_url", base64.b64encode(big).decode())],
        }
        r = await c.post(ADD, json=body)
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "quota_exceeded"
        assert await documents(c) == []
        page = await c.get("/v1/memories", params={"user_id": "ann"})
        assert page.json()["memories"] == []
        r = await c.post(ADD, json={"user_id": "ann", "messages": [small, small]})
        assert r.status_code == 200, r.text  # both fit: both stored, in one transaction
        assert [x["document"]["version"] for x in r.json()["results"]] == [1, 2]


async def test_documents_take_the_bulk_lane_and_memories_do_not(fresh_db, encoder):
    """Issue 33: a document's chunks ask the Embedder for its bulk lane (after other
    tenants' writes); the memories of the same add stay interactive."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN)
    boot = bootstrap(settings, fresh_db)
    embedded: list[tuple[list[str], bool]] = []
    bulk: list[list[str]] = []
    api = in_process_api(
        settings, boot.model, fresh_db, encoder, KEY, embedded=embedded, bulk_calls=bulk
    )
    async with api as (c, _):
        body = {
            "user_id": "ann",
            "infer": False,
            "messages": [
                {"role": "user", "content": "I prefer email to phone calls"},
                doc("mdx_url", base64.b64encode(MD).decode()),
            ],
        }
        r = await c.post(ADD, json=body)
        assert r.status_code == 200, r.text
        r = await c.post(
            "/v1/documents",
            json={"text": "Opening hours: nine to five.", "content_type": "text/plain"},
        )
        assert r.status_code in (200, 201), r.text
    in_bulk = [t for call in bulk for t in call]
    assert any("Refunds take five working days." in t for t in in_bulk)
    assert any("Opening hours" in t for t in in_bulk)  # POST /v1/documents
    assert "I prefer email to phone calls" not in in_bulk
    assert any("I prefer email to phone calls" in texts for texts, _ in embedded)
