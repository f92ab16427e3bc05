"""``python -m serve_app usage``: the tenant's LLM spend, as ``GET /v1/admin/usage`` says.

Needs the tenant's admin key (``--key`` or ``$MEMSERVE_API_KEY``). Prints a table of
the grouped sums and the top end users, or the answer as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from serve_app.cli import add_service_args
from serve_app.client import AsyncMemserveClient
from serve_app.client.errors import MemserveError
from serve_app.responses import LlmUsageReport

COLUMNS = ("calls", "prompt_tokens", "completion_tokens", "cached_tokens", "estimated_calls")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("usage", help="the tenant's LLM tokens by day, end user, purpose, model")
    add_service_args(p, "the tenant's admin key")
    p.add_argument("--group-by", default="day", help="comma-separated: day,user,purpose,model")
    p.add_argument("--since", default=None, help="first UTC day, YYYY-MM-DD (default: 30 days)")
    p.add_argument("--until", default=None, help="last UTC day, YYYY-MM-DD (default: today)")
    p.add_argument("--user", default=None, help="one end user's use only")
    p.add_argument("--top", type=int, default=10, help="top end users to list (0: none)")
    p.add_argument("--limit", type=int, default=100, help="rows per page")
    p.add_argument("--all", action="store_true", help="every page, not only the first")
    p.add_argument("--json", action="store_true", help="print the answer(s) as JSON")


async def fetch(client: AsyncMemserveClient, args: argparse.Namespace) -> list[LlmUsageReport]:
    """The report's pages (one unless ``--all``)."""
    pages, offset = [], 0
    while True:
        page = await client.llm_usage(
            group_by=args.group_by,
            since=args.since,
            until=args.until,
            user_id=args.user,
            top_users=args.top,
            limit=args.limit,
            offset=offset,
        )
        pages.append(page)
        if not args.all or page.next_offset is None:
            return pages
        offset = page.next_offset


def render(pages: list[LlmUsageReport], as_json: bool) -> str:
    if as_json:
        return "\n".join(json.dumps(p.model_dump(mode="json")) for p in pages)
    first = pages[0]
    keys = [{"user": "user_id"}.get(g, g) for g in first.group_by]
    head = [*keys, *COLUMNS]
    lines = [
        f"LLM use of tenant {first.tenant_id}, {first.since} .. {first.until}",
        "\t".join(head),
    ]
    for page in pages:
        for row in page.rows:
            r = row.model_dump()
            lines.append("\t".join(str(r[k] if r[k] is not None else "") for k in head))
    if first.top_users:
        lines += ["", "top end users\tcalls\ttotal_tokens"]
        lines += [f"{u.user_id}\t{u.calls}\t{u.total_tokens}" for u in first.top_users]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    if not args.key:
        raise SystemExit("an admin key is required (--key or MEMSERVE_API_KEY)")

    async def run() -> str:
        async with AsyncMemserveClient(args.url, args.key) as client:
            return render(await fetch(client, args), args.json)

    try:
        print(asyncio.run(run()))
    except MemserveError as exc:
        raise SystemExit(f"usage: {exc}") from None
