"""Attacks on the knowledge base over HTTP: SSRF through mem0 document URLs, another
tenant's document ids, PDF bombs and documents that would make too many chunks.

SSRF: a trap server listens on 127.0.0.1 and every spelling of it (decimal, octal, hex,
short, IPv4-mapped IPv6, ``localhost``), the metadata address, RFC 1918, IPv6 loopback
and non-http schemes are sent as ``pdf_url``/``mdx_url`` to ``/mem0`` add, directly
and as the target of a redirect from an allowed document server (127.0.0.2, the one
network the test service allows): each is a 422 ``url_refused``, the trap is never
reached, nothing is written. A PDF bomb (2 kB naming 2**20 pages, a 200 kB stream
inflating to 200 MB, a content stream every page shares, form XObjects drawing each
other) is a 413/422 within seconds; a Markdown document of 10**5 tiny
sections (more chunks than ``MEMSERVE_DOC_MAX_CHUNKS``) is a 413 that writes nothing.
"""

from __future__ import annotations

import secrets
import time

import pytest

from serve_app.testing.document_server import DocumentServer
from serve_app.testing.pdfs import (
    page_bomb,
    shared_stream_bomb,
    stream_bomb,
    text_pdf,
    xobject_bomb,
)
from tests.security.conftest import http
from tests.security.report import CASES, LEAKS, SERVER_ERRORS

pytestmark = pytest.mark.e2e
ADD = "/mem0/v3/memories/add/"
BOMB_S = 10.0  # a refused bomb answers within this (a careless reader takes minutes)


def _note(kind: str, status: int, what: str) -> None:
    CASES[kind] += 1
    if status >= 500:
        SERVER_ERRORS.append(f"{kind}: {what} -> {status}")


@pytest.fixture(scope="module")
def trap():
    s = DocumentServer(files={"/x": ("text/plain", b"secret of the internal network")}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def relay():
    """The allowed document server: serves a real PDF and redirects where it is told."""
    files = {"/ok.pdf": ("application/pdf", text_pdf(["Allowed."]))}
    s = DocumentServer(host="127.0.0.2", files=files).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tenants(sec_service):
    run = secrets.token_hex(3)
    out = {}
    for name in ("a", "b"):
        tenant = f"sec_doc_{name}_{run}"
        out[name] = {
            "service": sec_service.add_key("msk_" + secrets.token_hex(16), tenant, "service"),
            "user": sec_service.add_key("msk_" + secrets.token_hex(16), tenant, "user", "u1"),
        }
    return out


def ssrf_urls(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}/x",
        f"http://localhost:{port}/x",
        f"http://2130706433:{port}/x",  # decimal
        f"http://0177.0.0.1:{port}/x",  # octal
        f"http://0x7f.0.0.1:{port}/x",  # hex
        f"http://127.1:{port}/x",  # short form
        f"http://[::ffff:127.0.0.1]:{port}/x",  # IPv4-mapped IPv6
        f"http://[::ffff:7f00:1]:{port}/x",
        f"http://[::1]:{port}/x",
        f"http://0.0.0.0:{port}/x",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.0.1/",
        "http://172.16.0.1/",
        "http://100.64.0.1/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "ftp://127.0.0.1/",
        f"http://user:pw@127.0.0.2:{port}/x",
    ]


def test_ssrf_urls_through_mem0_add_are_refused(sec_service, tenants, trap, relay):
    key = tenants["a"]["service"]
    urls = ssrf_urls(trap.port)
    with http(sec_service, key) as c:
        part = {"type": "pdf_url", "pdf_url": {"url": relay.url("/ok.pdf")}}
        ok = c.post(ADD, json={"user_id": "u1", "messages": [{"role": "user", "content": part}]})
        assert ok.status_code == 200, ok.text  # the allowed server is read: the check is real
        assert ok.json()["results"][0]["document"]["chunk_count"] >= 1
        before = c.get("/v1/documents").json()["documents"]
        cases = [(u, "direct") for u in urls]
        cases += [(relay.url(f"/redirect?to={u}"), "redirect") for u in urls if "://" in u]
        for url, how in cases:
            for kind in ("pdf_url", "mdx_url"):
                body = {
                    "user_id": "u1",
                    "infer": False,
                    "messages": [
                        {"role": "user", "content": "keep this too"},
                        {"role": "user", "content": {"type": kind, kind: {"url": url}}},
                    ],
                }
                r = c.post(ADD, json=body)
                _note(f"ssrf: document URL ({how})", r.status_code, url)
                assert r.status_code == 422, (url, r.text)
                assert r.json()["error"]["code"] == "url_refused", (url, r.text)
        assert c.get("/v1/documents").json()["documents"] == before
        page = c.post("/mem0/v3/memories/", json={"filters": {"user_id": "u1"}}).json()
        assert page["count"] == 0  # the text message of a refused add is not kept either
    assert trap.hits == [], trap.hits  # nothing ever reached the private address


def test_another_tenants_document_ids_are_404_and_change_nothing(sec_service, tenants):
    a, b = tenants["a"], tenants["b"]
    with http(sec_service, a["service"]) as ca, http(sec_service, b["service"]) as cb:
        for doc_id, scope in (("policy-handbook", "org"), ("u1-notes", "user")):
            body = {
                "document_id": doc_id,
                "text": f"# {doc_id}\n\nTenant A's own words.",
                "content_type": "text/markdown",
                "scope": scope,
            }
            if scope == "user":
                body["user_id"] = "u1"
            r = ca.post("/v1/documents", json=body)
            assert r.status_code == 201, r.text
            head = r.json()
            for method, client in (("GET", cb), ("DELETE", cb)):
                r = client.request(method, f"/v1/documents/{doc_id}")
                _note("cross-tenant document id", r.status_code, f"{method} {doc_id}")
                assert r.status_code == 404, r.text
                if "Tenant A" in r.text:
                    LEAKS.append(f"{method} /v1/documents/{doc_id} as tenant B: {r.text[:200]}")
            listed = cb.get("/v1/documents").json()["documents"]
            assert doc_id not in {d["document_id"] for d in listed}
            with http(sec_service, b["user"]) as cu:  # tenant B's user of the same name
                r = cu.get(f"/v1/documents/{doc_id}")
                _note("cross-tenant document id", r.status_code, f"user GET {doc_id}")
                assert r.status_code == 404, r.text
            # tenant B posting the same id makes its own document; A's stays as it was
            r = cb.post("/v1/documents", json={**body, "text": "# B\n\nTenant B's words."})
            assert r.status_code == 201 and r.json()["version"] == 1, r.text
            got = ca.get(f"/v1/documents/{doc_id}")
            assert got.status_code == 200, got.text
            assert got.json()["document"]["version"] == head["version"]
            assert "Tenant A's own words." in got.text and "Tenant B" not in got.text


def test_another_tenants_document_jobs_are_404_and_change_nothing(sec_service, tenants):
    """Tenant B (its service key, its user of the same name) can neither read nor
    cancel tenant A's queued job, by id; A's job runs to done all the same."""
    a, b = tenants["a"], tenants["b"]
    body = {
        "document_id": "queued-manual",
        "text": "# Manual\n\nTenant A's queued words.",
        "content_type": "text/markdown",
        "scope": "user",
        "user_id": "u1",
    }
    with http(sec_service, a["service"]) as ca:
        r = ca.post("/v1/documents", json=body, headers={"Prefer": "respond-async"})
        assert r.status_code == 202, r.text
        where = r.headers["location"]
        for key in (b["service"], b["user"]):
            with http(sec_service, key) as cb:
                for method in ("GET", "DELETE"):
                    r = cb.request(method, where)
                    _note("cross-tenant document job", r.status_code, f"{method} {where}")
                    assert r.status_code == 404, r.text
                    if "queued-manual" in r.text:
                        LEAKS.append(f"{method} {where} as tenant B: {r.text[:200]}")
        deadline = time.monotonic() + 60
        while (job := ca.get(where).json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        assert job["status"] == "done", job


@pytest.mark.parametrize(
    "name,make",
    [
        ("page tree of 2**20 pages", page_bomb),
        ("200 MB stream", stream_bomb),
        ("one content stream parsed by 1000 pages", shared_stream_bomb),
        ("form XObjects drawn 10 x 10 x 10 times", xobject_bomb),
    ],
)
def test_pdf_bombs_are_refused_fast(sec_service, tenants, name, make):
    """Each within seconds (the parse's child is killed at MEMSERVE_DOC_PARSE_CPU_S,
    3 s in the test service), and the replica serves the other tenant right after."""
    data = make()
    assert len(data) < 512 * 1024
    with http(sec_service, tenants["a"]["service"]) as c:
        started = time.monotonic()
        r = c.post(
            "/v1/documents",
            files={"file": ("bomb.pdf", data, "application/pdf")},
            data={"scope": "org", "document_id": "bomb"},
        )
        took = time.monotonic() - started
        _note("document: PDF bomb", r.status_code, name)
        assert r.status_code in (413, 422), r.text
        assert took < BOMB_S, f"{name}: {took:.1f} s"
        assert c.get("/v1/documents/bomb").status_code == 404
    with http(sec_service, tenants["b"]["service"]) as other:
        r = other.post("/v1/documents", json={"text": "ten chars.", "scope": "org"})
        assert r.status_code == 201, r.text


def test_a_document_of_more_chunks_than_the_cap_is_413_and_writes_nothing(sec_service, tenants):
    text = "".join(f"# s{i}\n\nw{i}\n\n" for i in range(100_000))  # 10**5 tiny sections
    with http(sec_service, tenants["b"]["service"]) as c:
        before = c.get("/v1/documents").json()["documents"]
        body = {"document_id": "many", "text": text, "content_type": "text/markdown"}
        r = c.post("/v1/documents", json={**body, "scope": "org"})
        _note("document: 10**5 tiny chunks", r.status_code, "POST /v1/documents")
        assert r.status_code == 413, r.text
        assert c.get("/v1/documents/many").status_code == 404
        assert c.get("/v1/documents").json()["documents"] == before
