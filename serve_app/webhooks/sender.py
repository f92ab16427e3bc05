"""One signed POST per Standard Webhooks (https://www.standardwebhooks.com).

Headers ``webhook-id`` (the event's id: the same on every redelivery, so receivers
de-duplicate), ``webhook-timestamp`` and ``webhook-signature`` (HMAC-SHA256 by the
``standardwebhooks`` package with the subscription's secret). No redirects are
followed, the whole exchange is bounded by a timeout, and at most ``max_response_bytes``
of the answer are read: a receiver that hangs or answers 50 MB costs one slot for the
timeout, nothing more.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks import Webhook

from serve_app.webhooks.ssrf import Refused, TargetGuard

PAYLOAD_FIELDS = ("user_id", "agent_id", "session_id", "scope", "memory_id", "version",
                  "decision", "reason", "actor", "data")  # fmt: skip


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


class Sender:
    def __init__(
        self,
        guard: TargetGuard,
        *,
        timeout_s: float,
        max_response_bytes: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.guard = guard
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.http = httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(timeout_s),
            headers={"user-agent": "memserve-webhooks"},
            transport=transport,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, row: dict[str, Any]) -> Answer:
        """POST the event to the subscription's URL; never raises for the receiver's sake."""
        body = json.dumps(payload(row), separators=(",", ":"), default=str)
        now = datetime.now(UTC).replace(microsecond=0)
        msg_id = str(row["event_id"])
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(row["secret"]).sign(msg_id, now, body),
        }
        try:
            await self.guard.check(row["url"])
            async with asyncio.timeout(self.timeout_s):
                async with self.http.stream("POST", row["url"], content=body, headers=headers) as r:
                    read = 0
                    async for chunk in r.aiter_raw():
                        read += len(chunk)
                        if read >= self.max_response_bytes:
                            break  # closing the stream drops the rest
            if 200 <= r.status_code < 300:
                return Answer(True, r.status_code)
            return Answer(False, r.status_code, f"HTTP {r.status_code}")
        except Refused as exc:
            return Answer(False, None, f"refused: {exc}")
        except TimeoutError:
            return Answer(False, None, f"timed out after {self.timeout_s} s")
        except httpx.HTTPError as exc:
            return Answer(False, None, f"{type(exc).__name__}: {exc}"[:300])
