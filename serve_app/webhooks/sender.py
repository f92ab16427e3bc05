"""One signed POST per Standard Webhooks (https://www.standardwebhooks.com).

Headers ``webhook-id`` (the event's id: the same on every redelivery, so receivers
de-duplicate), ``webhook-timestamp`` and ``webhook-signature`` (HMAC-SHA256 by the
``standardwebhooks`` package with the subscription's secret). No redirects are
followed, the whole exchange is bounded by a timeout, and at most ``max_response_bytes``
of the answer are read: a receiver that hangs or answers 50 MB costs one slot for the
timeout, nothing more.

Why aiohttp and not httpx: the dispatcher's CPU is taken from the writes on a small box,
and a kept-alive POST costs ~0.35 ms of CPU with aiohttp against ~1.4 ms with httpx
(loadtests/bench_dispatch.py, docs/events.md). Connections are kept alive per host
(sequential posts of an owner's chain reuse one), and the connector resolves names
through the SSRF guard, so a connection goes only to an address the guard checked (no
DNS-rebinding window); an IP literal, which needs no resolving, is checked here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks import Webhook
from yarl import URL

from serve_app.webhooks.ssrf import Refused, TargetGuard

PAYLOAD_FIELDS = (
    "user_id",
    "agent_id",
    "session_id",
    "scope",
    "memory_id",
    "version",
    "decision",
    "reason",
    "actor",
    "data",
)
CACHED = 1024  # parsed URLs and signing keys kept (one each per subscription in use)
USER_AGENT = "memserve-webhooks"
# An idle connection is closed before common servers' own keep-alive (uvicorn: 5 s) does,
# so a post rarely meets a connection the receiver is closing.
KEEPALIVE_S = 4.0


@dataclass(frozen=True)
class Answer:
    ok: bool
    status: int | None
    error: str | None = None


def payload(row: dict[str, Any]) -> dict[str, Any]:
    """The body of one event: type, timestamp and data (content only when subscribed)."""
    data: dict[str, Any] = {"id": str(row["event_id"])}
    data |= {k: (str(row[k]) if k == "memory_id" and row[k] else row[k]) for k in PAYLOAD_FIELDS}
    if row.get("include_content"):
        data["content"] = row.get("content")
    return {"type": row["type"], "timestamp": row["occurred_at"].isoformat(), "data": data}


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver for the webhook connector: every address it returns passed
    the guard (a name with any refused address raises :class:`Refused`)."""

    def __init__(self, guard: TargetGuard) -> None:
        self.guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=str(a),
                port=port,
                proto=0,
                family=socket.AF_INET6 if a.version == 6 else socket.AF_INET,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for a in await self.guard.resolve_host(host, port)
        ]

    async def close(self) -> None:
        pass


class Sender:
    def __init__(self, guard: TargetGuard, *, timeout_s: float, max_response_bytes: int) -> None:
        self.guard = guard
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self._urls: dict[str, URL] = {}  # checked (shape, IP literal) and parsed once
        self._signers: dict[str, Webhook] = {}  # the secret's key decoded once
        self._http: aiohttp.ClientSession | None = None  # made in the running loop

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self.guard),
                use_dns_cache=False,  # every new connection resolves (and checks) again
                limit=0,  # the dispatcher's in-flight slots bound the connections
                keepalive_timeout=KEEPALIVE_S,
            )
            self._http = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers={"user-agent": USER_AGENT},
                auto_decompress=False,  # the answer is capped raw, never inflated
                trust_env=False,  # no proxy from the environment
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def target(self, url: str) -> URL:
        """The parsed URL, refused unless http(s) without credentials and, for an IP
        literal (which aiohttp connects to without resolving), an allowed address."""
        known = self._urls.get(url)
        if known is not None:
            return known
        self.guard.shape(url)
        parsed = URL(url)
        try:
            literal = ipaddress.ip_address(parsed.host or "")
        except ValueError:
            literal = None  # a name: the connector's resolver checks it per connection
        if parsed.scheme not in ("http", "https") or parsed.user or parsed.password:
            raise Refused("the URL must be http(s)://host/... without credentials")
        if literal is not None and not self.guard.allowed_address(literal):
            raise Refused(f"{literal} is a private or reserved address")
        if len(self._urls) >= CACHED:
            self._urls.clear()
        self._urls[url] = parsed
        return parsed

    def signer(self, secret: str) -> Webhook:
        hook = self._signers.get(secret)
        if hook is None:
            if len(self._signers) >= CACHED:
                self._signers.clear()
            hook = self._signers[secret] = Webhook(secret)
        return hook

    async def send(self, row: dict[str, Any]) -> Answer:
        """POST the event to the subscription's URL; never raises for the receiver's sake."""
        body = json.dumps(payload(row), separators=(",", ":"), default=str)
        now = datetime.now(UTC).replace(microsecond=0)
        msg_id = str(row["event_id"])
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self.signer(row["secret"]).sign(msg_id, now, body),
        }
        try:
            url = self.target(row["url"])
            async with asyncio.timeout(self.timeout_s):
                async with self._session().post(
                    url, data=body.encode(), headers=headers, allow_redirects=False
                ) as r:
                    read = 0
                    while read < self.max_response_bytes:
                        chunk = await r.content.readany()
                        if not chunk:
                            break
                        read += len(chunk)
                    # an answer left unread closes its connection as the context exits
            if 200 <= r.status < 300:
                return Answer(True, r.status)
            return Answer(False, r.status, f"HTTP {r.status}")
        except Refused as exc:
            return Answer(False, None, f"refused: {exc}")
        except TimeoutError:
            return Answer(False, None, f"timed out after {self.timeout_s} s")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Answer(False, None, f"{type(exc).__name__}: {exc}"[:300])
