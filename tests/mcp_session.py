"""The real MCP client (mcp.client.streamable_http + ClientSession) for the MCP tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_over_http(
    url: str, key: str | None, transport: httpx2.AsyncBaseTransport | None = None
) -> AsyncIterator[ClientSession]:
    """An initialised MCP session to ``url`` sending ``key`` as the bearer key."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, transport=transport, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's result as JSON (its text), asserting it is not a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    text = result.content[0].text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


async def tool_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.content
    return result.content[0].text
