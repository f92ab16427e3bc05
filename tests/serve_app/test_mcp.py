"""The MCP tools at /mcp without Ray: the real MCP client against the Ingress's own app.

Real Postgres and the real ONNX encoder behind the composition root; the client speaks
streamable HTTP to the app over an in-process ASGI transport (the lifespan runs the
MCP session manager, as Serve runs it in a replica).
"""

from __future__ import annotations

import httpx2
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.store.keys import seed_key
from serve_app.testing.inprocess import in_process_app, in_process_services
from tests.mcp_session import call, mcp_over_http, tool_error

KEY = "msk_mcp_service_key_0123456789abcdef"
ALICE = "msk_mcp_alice_user_key_0123456789ab"
URL = "http://memserve.test/mcp"


@pytest.fixture
async def transport(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    seed_key(fresh_db, settings.default_tenant, "user", ALICE, "alice", user_id="alice")
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,  # its lifespan runs the MCP sessions
    ):
        yield httpx2.ASGITransport(app=app)


async def test_tools_and_their_input_schemas(transport):
    async with mcp_over_http(URL, KEY, transport) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == {
        "add_memory",
        "add_conversation",
        "search_memories",
        "get_context",
        "list_memories",
        "delete_memory",
        "forget",
    }
    add = tools["add_memory"].input_schema
    assert add["required"] == ["content"]
    assert add["properties"]["content"]["minLength"] == 1
    assert tools["forget"].input_schema["required"] == ["user_id"]
    top_k = tools["search_memories"].input_schema["properties"]["top_k"]
    assert top_k["minimum"] == 1 and top_k["maximum"] == 100
    assert all(t.description for t in tools.values())


async def test_a_tenants_endpoint_serves_that_tenants_callers_only(transport):
    """``/mcp/{tenant}`` is where a tenant's users sign in (its 401 names the tenant's
    own sign-in document); a key of another tenant is refused there."""
    async with mcp_over_http("http://memserve.test/mcp/default", KEY, transport) as s:
        added = await call(s, "add_memory", content="I grow tomatoes", user_id="cy")
        assert added["user_id"] == "cy"
    async with httpx2.AsyncClient(transport=transport, base_url="http://memserve.test") as h:
        r = await h.post(
            "/mcp/other-tenant",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {KEY}", "Accept": "application/json"},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


async def test_add_search_context_list_delete_round_trip(transport):
    async with mcp_over_http(URL, KEY, transport) as s:
        bees = await call(s, "add_memory", content="I keep bees in Porto", user_id="bo")
        await call(s, "add_memory", content="My sister is called Ines", user_id="bo")
        hits = await call(s, "search_memories", query="what insects do I keep", user_id="bo")
        assert hits["results"][0]["id"] == bees["id"]
        block = await call(s, "get_context", query="tell me about my bees", user_id="bo")
        assert "bees in Porto" in block
        listed = await call(s, "list_memories", user_id="bo")
        assert len(listed["memories"]) == 2
        assert await call(s, "delete_memory", memory_id=bees["id"], user_id="bo") == {
            "deleted": bees["id"]
        }
        listed = await call(s, "list_memories", user_id="bo")
        assert [m["content"] for m in listed["memories"]] == ["My sister is called Ines"]
        assert (await call(s, "forget", user_id="bo"))["deleted"] == 1
        assert (await call(s, "list_memories", user_id="bo"))["memories"] == []


async def test_bad_input_is_a_clear_tool_error_and_changes_nothing(transport):
    async with mcp_over_http(URL, KEY, transport) as s:
        assert "content" in await tool_error(s, "add_memory", content="", user_id="cy")
        assert "user_id is required" in await tool_error(s, "add_memory", content="x")
        assert "top_k" in await tool_error(s, "search_memories", query="x", user_id="cy", top_k=0)
        assert "memory_id" in await tool_error(s, "delete_memory", memory_id="nope", user_id="cy")
        assert "importance" in await tool_error(
            s, "add_memory", content="x", user_id="cy", importance=2
        )
        assert (await call(s, "list_memories", user_id="cy"))["memories"] == []


async def test_a_user_key_sees_only_its_user(transport):
    async with mcp_over_http(URL, KEY, transport) as s:
        bobs = await call(s, "add_memory", content="Bob's bank PIN is 4321", user_id="bob")
    async with mcp_over_http(URL, ALICE, transport) as s:
        mine = await call(s, "add_memory", content="I play the oboe")
        assert mine["user_id"] == "alice"
        hits = await call(s, "search_memories", query="bank PIN")
        assert bobs["id"] not in {m["id"] for m in hits["results"]}
        assert "forbidden" in await tool_error(s, "search_memories", query="PIN", user_id="bob")
        # another user's memory answers like a missing one
        err = await tool_error(s, "delete_memory", memory_id=bobs["id"])
        assert "not_found" in err
        assert "service key" in await tool_error(s, "forget", user_id="alice")
    async with mcp_over_http(URL, KEY, transport) as s:
        assert len((await call(s, "list_memories", user_id="bob"))["memories"]) == 1


async def test_a_bad_key_is_refused_before_mcp(transport):
    async with httpx2.AsyncClient(transport=transport) as http:
        for headers in ({}, {"Authorization": "Bearer msk_wrong"}):
            r = await http.post(URL, headers=headers, json={"jsonrpc": "2.0", "id": 1})
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "unauthorized"


async def test_search_shows_what_is_true_now_or_as_of(transport):
    auth = {"Authorization": f"Bearer {KEY}"}
    http = httpx2.AsyncClient(transport=transport, base_url="http://memserve.test", headers=auth)
    async with http, mcp_over_http(URL, KEY, transport) as s:
        porto = await http.post(
            "/v1/memories",
            json={
                "user_id": "vi",
                "content": "I live in Porto",
                "valid_from": "2026-01-01T00:00:00Z",
            },
        )
        lisbon = await http.post(
            "/v1/memories",
            json={
                "user_id": "vi",
                "content": "I live in Lisbon",
                "valid_from": "2026-06-01T00:00:00Z",
                "supersedes": [porto.json()["id"]],
            },
        )
        assert lisbon.status_code == 201, lisbon.text
        now = await call(s, "search_memories", query="where do I live", user_id="vi")
        assert [m["content"] for m in now["results"]] == ["I live in Lisbon"]
        then = await call(
            s, "search_memories", query="where do I live", user_id="vi", as_of="2026-03-01"
        )
        assert [m["content"] for m in then["results"]] == ["I live in Porto"]
        listed = await call(s, "list_memories", user_id="vi")
        assert [m["content"] for m in listed["memories"]] == ["I live in Lisbon"]
