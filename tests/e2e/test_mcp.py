"""The real MCP client against `make run`'s service: /mcp over HTTP, and the stdio entry point.

Both speak to the same bearer keys as /v1 and never show another user's memory.
"""

from __future__ import annotations

import sys

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from serve_app.mcp.stdio import KEY_ENV
from serve_app.testing.service import REPO
from tests.mcp_session import call, mcp_over_http, tool_error

pytestmark = pytest.mark.e2e


async def test_http_round_trip_and_isolation(service, keys, uid):
    url = f"{service.base_url}/mcp"
    async with mcp_over_http(url, keys.service) as s:
        bees = await call(s, "add_memory", content="I keep bees in Porto", user_id=uid)
        hits = await call(s, "search_memories", query="what insects do I keep", user_id=uid)
        assert hits["results"][0]["id"] == bees["id"]
        assert "bees in Porto" in await call(s, "get_context", query="my bees", user_id=uid)
        assert [m["id"] for m in (await call(s, "list_memories", user_id=uid))["memories"]] == [
            bees["id"]
        ]
        bobs = await call(s, "add_memory", content="Bob's locker code is 7788", user_id="bob")
    async with mcp_over_http(url, keys.alice) as s:
        hits = await call(s, "search_memories", query="locker code")
        assert bobs["id"] not in {m["id"] for m in hits["results"]}
        assert "not_found" in await tool_error(s, "delete_memory", memory_id=bobs["id"])
        assert "forbidden" in await tool_error(s, "list_memories", user_id="bob")
    async with mcp_over_http(url, keys.service_t2) as s:  # another tenant, same user id
        err = await tool_error(s, "delete_memory", memory_id=bees["id"], user_id=uid)
        assert "not_found" in err
    async with mcp_over_http(url, keys.service) as s:
        assert await call(s, "delete_memory", memory_id=bees["id"], user_id=uid)
        # bob is shared with other e2e tests: his memories from them go too.
        assert (await call(s, "forget", user_id="bob"))["deleted"] >= 1
        assert (await call(s, "list_memories", user_id="bob"))["memories"] == []
        assert (await call(s, "list_memories", user_id=uid))["memories"] == []


async def test_stdio_entry_point_proxies_to_the_api(service, keys):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "serve_app", "mcp", "--url", service.base_url],
        env={KEY_ENV: keys.bob},
        cwd=REPO,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        mine = await call(s, "add_memory", content="I am allergic to hazelnuts")
        assert mine["user_id"] == "bob"
        hits = await call(s, "search_memories", query="food allergies")
        assert hits["results"][0]["id"] == mine["id"]
        assert all(m["user_id"] == "bob" for m in hits["results"])
        assert "service key" in await tool_error(s, "forget", user_id="bob")
        assert "forbidden" in await tool_error(s, "search_memories", query="x", user_id="alice")
        assert await call(s, "delete_memory", memory_id=mine["id"])
        listed = await call(s, "list_memories")
        assert mine["id"] not in {m["id"] for m in listed["memories"]}
