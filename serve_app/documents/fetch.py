"""Documents named by URL: a bounded, SSRF-safe fetch (and inline base64 / data URLs).

mem0's document messages (``pdf_url``, ``mdx_url``, ``txt_url``) name a URL the
service must read, so any caller can make a replica send a request. Each hop's host
is resolved and every address checked (``serve_app.webhooks.ssrf.TargetGuard``:
private, loopback, link-local, multicast, reserved and IPv4-in-IPv6 forms refused),
then the connection goes to the address that was checked, never a second lookup a
rebinding DNS could answer differently (TLS still verifies the host's name through
SNI). Redirects are followed by hand, at most ``max_redirects``, each target checked
the same way. The body is read raw (``Accept-Encoding: identity``: no decompression
bomb) and aborted past ``max_bytes`` (413); the whole fetch, every hop included, has
``timeout_s``; at most ``max_concurrent`` run per replica. Failures are the caller's
4xx, never a hang or a 500.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

import httpx

from serve_app.errors import ApiError
from serve_app.settings import FetchSettings
from serve_app.webhooks.ssrf import Address, Refused, TargetGuard

REDIRECTS = (301, 302, 303, 307, 308)


class FetchError(ApiError):
    """A document URL that could not be read: refused (SSRF), too large, too slow, or
    answered with an error. ``status`` is the caller's: 413 for size, 422 otherwise."""


class ByteBudget:
    """Bytes of documents a replica holds at once (one event loop: no lock needed)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def take(self, n: int) -> bool:
        if self.used + n > self.total:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used = max(0, self.used - n)


class Held:
    """The documents one request has read, counted in the replica's byte budget until
    the request is done (:meth:`DocumentFetcher.holding`)."""

    def __init__(self, fetcher: DocumentFetcher) -> None:
        self.fetcher = fetcher
        self.bytes = 0

    async def load(self, ref: str) -> Fetched:
        """:meth:`DocumentFetcher.load`, reserved first at the most it can hold."""
        f = self.fetcher
        reserve = f.s.max_bytes
        if not f.budget.take(reserve):
            raise FetchError(
                503,
                "busy",
                f"this replica holds {f.budget.used} bytes of documents; retry shortly",
                headers={"Retry-After": "2"},
            )
        try:
            got = await f.load(ref)
        except BaseException:
            f.budget.give(reserve)
            raise
        f.budget.give(reserve - len(got.data))
        self.bytes += len(got.data)
        return got

    def release(self) -> None:
        self.fetcher.budget.give(self.bytes)
        self.bytes = 0


@dataclass(frozen=True)
class Fetched:
    data: bytes
    content_type: str | None  # the answer's (or data URL's) media type, parameters dropped
    url: str | None  # where it was read from after redirects (None: inline data)


def _media_type(value: str | None) -> str | None:
    if not value:
        return None
    return value.split(";", 1)[0].strip().lower() or None


class DocumentFetcher:
    """One replica's document fetches under ``FetchSettings``' limits."""

    def __init__(self, s: FetchSettings, client: httpx.AsyncClient | None = None) -> None:
        self.s = s
        self.guard = TargetGuard(s.allowed_networks, allow_private=s.allow_private)
        self.client = client or httpx.AsyncClient(
            follow_redirects=False, trust_env=False, timeout=s.timeout_s
        )
        self.gate = asyncio.Semaphore(s.max_concurrent)
        self.budget = ByteBudget(s.max_bytes_in_flight)

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[Held]:
        """Documents read for one request, in the budget until it is done."""
        held = Held(self)
        try:
            yield held
        finally:
            held.release()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def load(self, ref: str) -> Fetched:
        """``ref`` as mem0 sends it: an http(s) URL, a ``data:`` URL, or bare base64."""
        ref = ref.strip()
        if ref[:5].lower() == "data:":
            return self.inline(ref)
        if ref[:7].lower() == "http://" or ref[:8].lower() == "https://":
            return await self.fetch(ref)
        if "://" in ref[:16]:
            raise FetchError(422, "url_refused", "only http(s) URLs are fetched")
        return Fetched(self._b64(ref), None, None)

    def inline(self, ref: str) -> Fetched:
        """A ``data:[<type>][;base64],<data>`` URL (RFC 2397), size-checked before decoding."""
        head, sep, payload = ref[5:].partition(",")
        if not sep:
            raise FetchError(422, "invalid_request", "a data URL needs a ',' before its data")
        params = head.split(";")
        media = _media_type(params[0]) if params[0] else "text/plain"
        if "base64" in (p.strip().lower() for p in params[1:]):
            return Fetched(self._b64(payload), media, None)
        if len(payload) > self.s.max_bytes * 3:  # percent-encoding: at most 3 chars a byte
            raise self._too_large()
        data = unquote_to_bytes(payload)
        if len(data) > self.s.max_bytes:
            raise self._too_large()
        return Fetched(data, media, None)

    def _b64(self, text: str) -> bytes:
        if len(text) // 4 * 3 > self.s.max_bytes + 3:
            raise self._too_large()
        try:
            data = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise FetchError(
                422, "invalid_request", "the document is neither an http(s) URL nor base64"
            ) from None
        if len(data) > self.s.max_bytes:
            raise self._too_large()
        return data

    def _too_large(self) -> FetchError:
        return FetchError(
            413, "payload_too_large", f"the document is larger than {self.s.max_bytes} bytes"
        )

    async def fetch(self, url: str) -> Fetched:
        """GET ``url`` under the SSRF, redirect, size and time limits."""
        try:
            async with asyncio.timeout(self.s.timeout_s), self.gate:
                return await self._follow(url)
        except TimeoutError:
            raise FetchError(
                422, "fetch_timeout", f"{url}: not read within {self.s.timeout_s} s"
            ) from None
        except Refused as exc:
            raise FetchError(422, "url_refused", f"{url}: {exc}") from None
        except httpx.RemoteProtocolError as exc:
            if "location header" in str(exc).lower():  # httpx could not parse a redirect
                raise FetchError(422, "url_refused", f"{url}: redirect to {exc}") from None
            raise FetchError(422, "fetch_failed", f"{url}: {type(exc).__name__}") from None
        except httpx.InvalidURL as exc:  # a redirect's Location httpx cannot parse
            raise FetchError(422, "url_refused", f"{url}: {exc}") from None
        except (httpx.HTTPError, OSError, UnicodeError, ValueError) as exc:
            raise FetchError(422, "fetch_failed", f"{url}: {type(exc).__name__}") from None

    async def _follow(self, url: str) -> Fetched:
        for _hop in range(self.s.max_redirects + 1):
            addresses = await self.guard.resolve(url)
            response = await self._send(httpx.URL(url), addresses[0])
            try:
                if response.status_code in REDIRECTS and "location" in response.headers:
                    url = str(httpx.URL(url).join(response.headers["location"]))
                    continue
                if response.status_code != 200:
                    raise FetchError(
                        422, "fetch_failed", f"{url}: answered HTTP {response.status_code}"
                    )
                data = await self._read(response)
                return Fetched(data, _media_type(response.headers.get("content-type")), url)
            finally:
                await response.aclose()
        raise FetchError(422, "url_refused", f"more than {self.s.max_redirects} redirects")

    async def _send(self, url: httpx.URL, address: Address) -> httpx.Response:
        """A GET sent to ``address`` (checked) with the URL's own Host and TLS name."""
        pinned = url.copy_with(host=str(address))
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        headers = {"Host": url.netloc.decode("ascii"), "Accept-Encoding": "identity"}
        request = self.client.build_request("GET", pinned, headers=headers, extensions=extensions)
        return await self.client.send(request, stream=True)

    async def _read(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.s.max_bytes:
            raise self._too_large()
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > self.s.max_bytes:
                raise self._too_large()
        return bytes(body)
