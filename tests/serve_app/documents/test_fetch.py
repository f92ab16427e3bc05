"""The document fetcher against a real HTTP server on loopback.

The server is loopback, so it is itself the first SSRF case: refused by default,
read when the test switch (``allow_private``) or an allowed network lets it. The other
private targets (metadata, RFC 1918, IPv6 loopback, IPv4-mapped, decimal/octal/hex
spellings) are IP literals or names resolved locally: the guard refuses them before
any connection, so no test depends on the network.
"""

from __future__ import annotations

import base64
import time

import httpx
import pytest

from serve_app.documents.fetch import DocumentFetcher, FetchError
from serve_app.settings import FetchSettings
from serve_app.testing.document_server import DocumentServer

PDF = b"%PDF-1.4 fake bytes for the fetcher (not parsed here)"
MD = b"# Title\n\nSome *markdown* text.\n"


@pytest.fixture
def server():
    s = DocumentServer(
        files={"/doc.md": ("text/markdown; charset=utf-8", MD), "/a.pdf": ("application/pdf", PDF)}
    ).start()
    yield s
    s.stop()


def fetcher(**kw) -> DocumentFetcher:
    return DocumentFetcher(FetchSettings(**kw))


async def refused(f: DocumentFetcher, url: str, code: str = "url_refused") -> FetchError:
    with pytest.raises(FetchError) as info:
        await f.load(url)
    assert info.value.code == code, info.value.message
    return info.value


async def test_loopback_refused_by_default_and_read_with_the_test_switch(server):
    f = fetcher()
    try:
        err = await refused(f, server.url("/doc.md"))
        assert err.status == 422 and "127.0.0.1" in err.message
        assert server.hits == []  # refused before any connection
    finally:
        await f.aclose()
    f = fetcher(allow_private=True)
    try:
        got = await f.load(server.url("/doc.md"))
        assert (got.data, got.content_type) == (MD, "text/markdown")
        assert got.url == server.url("/doc.md")
    finally:
        await f.aclose()


async def test_an_allowed_network_is_read_and_other_private_targets_are_not(server):
    f = fetcher(allowed_networks=["127.0.0.1/32"])
    try:
        assert (await f.load(server.url("/a.pdf"))).data == PDF
        for url in (
            "http://169.254.169.254/latest/meta-data/",  # cloud metadata
            "http://10.0.0.5/",
            "http://192.168.1.1/",
            "http://172.16.0.1/",
            "http://100.64.0.1/",  # carrier-grade NAT
            "http://0.0.0.0/",
            "http://224.0.0.1/",
            "http://240.0.0.1/",
            "http://[::1]/",
            "http://[fe80::1]/",
            "http://[fc00::1]/",
            "http://[ff02::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[2002:a00:1::]/",  # 6to4 carrying 10.0.0.1
            "http://127.0.0.2/",  # loopback outside the allowed /32
        ):
            await refused(f, url)
    finally:
        await f.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",  # 127.0.0.1 as one decimal number
        "http://0x7f.1/",  # hex and short form
        "http://0177.0.0.1/",  # octal
        "http://localhost/",
        "http://[::ffff:127.0.0.1]/",
    ],
)
async def test_other_spellings_of_loopback_are_refused(url):
    f = fetcher()
    try:
        await refused(f, url)
    finally:
        await f.aclose()


async def test_only_http_and_https_without_credentials():
    f = fetcher(allow_private=True)
    try:
        for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://127.0.0.1/"):
            await refused(f, url)
        await refused(f, "http://user:pw@127.0.0.1/")
    finally:
        await f.aclose()


async def test_redirects_are_followed_only_to_allowed_targets_each_hop(server):
    f = fetcher(allowed_networks=["127.0.0.1/32"], max_redirects=2)
    try:
        ok = await f.load(server.url("/redirect?to=/doc.md"))
        assert ok.data == MD and ok.url == server.url("/doc.md")
        for target in (
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:1/",
            "http://10.0.0.1/",
            "http://167772161/",  # 10.0.0.1 in decimal
            "http://0177.0.0.1/",  # octal: httpx cannot parse it as a Location
        ):
            server.hits.clear()
            await refused(f, server.url(f"/redirect?to={target}"))
            assert server.hits == ["/redirect?to=" + target]  # the private hop never sent
        await refused(f, server.url("/loop"))  # more hops than allowed
        assert server.hits.count("/loop") == 3
    finally:
        await f.aclose()


async def test_the_test_switch_does_not_make_redirects_unbounded(server):
    f = fetcher(allow_private=True, max_redirects=0)
    try:
        err = await refused(f, server.url("/redirect?to=/doc.md"))
        assert "redirects" in err.message
    finally:
        await f.aclose()


@pytest.mark.parametrize("path", ["/huge", "/huge-declared"])
async def test_an_oversized_body_is_aborted_with_413(server, path):
    f = fetcher(allow_private=True, max_bytes=64 * 1024)
    try:
        started = time.monotonic()
        err = await refused(f, server.url(path), "payload_too_large")
        assert err.status == 413
        assert time.monotonic() - started < 5  # did not read the 8 MB
    finally:
        await f.aclose()


async def test_a_slow_body_is_timed_out(server):
    server.slow_step_s = 0.2  # 200 bytes at 5 a second: 40 s to read whole
    f = fetcher(allow_private=True, timeout_s=0.5)
    try:
        started = time.monotonic()
        err = await refused(f, server.url("/slow"), "fetch_timeout")
        assert err.status == 422
        assert time.monotonic() - started < 3
    finally:
        await f.aclose()


async def test_error_answers_and_unreachable_hosts_are_422(server):
    f = fetcher(allow_private=True, timeout_s=2)
    try:
        err = await refused(f, server.url("/missing"), "fetch_failed")
        assert "404" in err.message
        await refused(f, "http://127.0.0.1:1/", "fetch_failed")  # nothing listens
        await refused(f, "http://no-such-host.invalid/")  # does not resolve
    finally:
        await f.aclose()


async def test_the_connection_goes_to_the_checked_address_with_the_urls_host():
    """Pinning: the request is sent to the address the guard checked, with the URL's
    own Host header (a rebinding DNS gets no second lookup to answer differently)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        headers = {"content-type": "text/plain"}
        return httpx.Response(200, stream=httpx.ByteStream(b"ok"), headers=headers)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    f = DocumentFetcher(FetchSettings(allow_private=True), client=client)
    try:
        got = await f.load("http://localhost:8123/x?y=1")
        assert got.data == b"ok"
        assert seen[0].url.host in ("127.0.0.1", "::1")
        assert seen[0].headers["host"] == "localhost:8123"
        assert seen[0].headers["accept-encoding"] == "identity"
    finally:
        await f.aclose()


async def test_inline_documents_base64_and_data_urls():
    f = fetcher(max_bytes=1024)
    try:
        assert (await f.load(base64.b64encode(MD).decode())).data == MD
        got = await f.load("data:application/pdf;base64," + base64.b64encode(PDF).decode())
        assert (got.data, got.content_type, got.url) == (PDF, "application/pdf", None)
        plain = await f.load("data:,hello%20world")
        assert (plain.data, plain.content_type) == (b"hello world", "text/plain")
        await refused(f, "not base64 at all!", "invalid_request")
        await refused(f, "data:text/plain;base64", "invalid_request")
        err = await refused(f, base64.b64encode(b"x" * 2048).decode(), "payload_too_large")
        assert err.status == 413
        await refused(f, "data:;base64," + "A" * 8000, "payload_too_large")
    finally:
        await f.aclose()
