"""``python -m serve_app mcp --url URL --key KEY``: the MCP tools over stdio, for desktop agents.

The agent starts this process and speaks MCP on its stdin/stdout; every tool call is
a call of the memserve HTTP API at ``URL`` with ``KEY``, so the service applies its
own authentication, limits and isolation. Logs go to stderr (stdout is the protocol).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import Context

from serve_app.client import AsyncMemserveClient
from serve_app.client.errors import InvalidRequest
from serve_app.mcp.tools import build_server

KEY_ENV = "MEMSERVE_MCP_KEY"
URL_ENV = "MEMSERVE_MCP_URL"


class OverHttp:
    """Tool calls as HTTP API calls with one key (the whole process acts as one caller)."""

    def __init__(self, url: str, key: str) -> None:
        self.api = AsyncMemserveClient(url, key)
        self._may_name_users: bool | None = None

    @asynccontextmanager
    async def client(self, ctx: Context) -> AsyncIterator[AsyncMemserveClient]:
        yield self.api  # shared connection pool, closed when the server stops

    async def may_name_users(self, ctx: Context) -> bool:
        if self._may_name_users is None:
            # A user key lists its own memories without naming a user; a service key
            # must name one (400). Other errors (401, 503) surface as tool errors.
            try:
                await self.api.list(limit=1)
                self._may_name_users = False
            except InvalidRequest:
                self._may_name_users = True
        return self._may_name_users


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``mcp`` subcommand of ``python -m serve_app``."""
    p = sub.add_parser("mcp", help="MCP server over stdio for desktop agents (proxies the API)")
    p.add_argument("--url", default=os.environ.get(URL_ENV, "http://127.0.0.1:8000"))
    p.add_argument(
        "--key",
        default=os.environ.get(KEY_ENV),
        help=f"API key (default: ${KEY_ENV}; the environment keeps it out of `ps`)",
    )


def main(args: argparse.Namespace) -> None:
    if not args.key:
        raise SystemExit(f"an API key is required: --key or {KEY_ENV}")
    logging.basicConfig(level=logging.WARNING)  # stderr
    anyio.run(serve, args.url.rstrip("/"), args.key)


async def serve(url: str, key: str) -> None:
    connector = OverHttp(url, key)
    try:
        await build_server(connector).run_stdio_async()
    finally:
        await connector.api.aclose()
