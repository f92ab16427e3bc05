"""The Python client (sync and async) against the real service: every call, typed results."""

from __future__ import annotations

import secrets
import uuid

import pytest

from serve_app.client import (
    AsyncMemserveClient,
    Forbidden,
    InvalidRequest,
    MemserveClient,
    NotFound,
    RateLimited,
    Unauthorized,
)
from serve_app.responses import Fact, TenantSettingsView, TurnsAccepted
from serve_app.schemas import ContextResponse, Memory, SearchResponse

pytestmark = pytest.mark.e2e


def test_sync_client_covers_the_api(service, keys, uid):
    with MemserveClient(service.base_url, keys.service) as m:
        assert m.health().status == "ok" and m.ready().status == "ready"
        a = m.add("I am allergic to peanuts", user_id=uid, type="fact", tags=["health"])
        assert isinstance(a, Memory) and a.user_id == uid and a.tags == ["health"]
        batch = m.add_batch(
            [{"content": "I run marathons"}, {"content": "I live in Oslo", "session_id": "c1"}],
            user_id=uid,
        )
        assert [x.content for x in batch.memories] == ["I run marathons", "I live in Oslo"]
        assert m.get(a.id, user_id=uid) == a
        updated = m.update(a.id, user_id=uid, importance=0.9)
        assert updated.importance == pytest.approx(0.9)
        assert [e.event for e in m.history(a.id, user_id=uid).events] == ["ADD", "UPDATE"]
        assert len(m.list(user_id=uid, limit=10).memories) == 3
        hits = m.search("food allergies", user_id=uid, top_k=2)
        assert isinstance(hits, SearchResponse) and hits.results[0].id == a.id
        ctx = m.context("what can't I eat?", user_id=uid, history=[("user", "dinner plans")])
        assert isinstance(ctx, ContextResponse) and "peanuts" in ctx.context
        turns = m.add_turns("c1", [("user", "I just adopted a cat")], user_id=uid)
        assert isinstance(turns, TurnsAccepted) and turns.accepted == 1
        assert m.session_status("c1", user_id=uid).turns == 1
        assert m.end_session("c1", user_id=uid).session_id == "c1"
        fact = m.set_fact("pets", "cat", "yes", user_id=uid)
        assert isinstance(fact, Fact) and m.facts(user_id=uid).facts == [fact]
        assert m.delete_facts(user_id=uid, category="pets").deleted == 1
        users, cursor = set(), None
        while uid not in users:  # the tenant's users, page by page
            page = m.users(limit=50, cursor=cursor)
            users |= {u.user_id for u in page.users}
            if (cursor := page.next_cursor) is None:
                break
        assert uid in users
        assert m.delete_scope(user_id=uid, session_id="c1").deleted == 1
        m.delete(a.id, user_id=uid)
        with pytest.raises(NotFound):
            m.get(a.id, user_id=uid)
        with pytest.raises(InvalidRequest):
            m.add("x")  # a service key must name the user
        with pytest.raises(Forbidden):
            m.list_keys()


def test_admin_calls_and_typed_auth_errors(service):
    with MemserveClient(service.base_url, service.admin_key) as admin:
        created = admin.create_key("user", user_id="client_u", name="c", rate_limit_per_s=0.2)
        assert created.key.startswith("msk_") and created.user_id == "client_u"
        assert created.id in {k.id for k in admin.list_keys().keys}
        assert admin.get_key(created.id).name == "c"
        with MemserveClient(service.base_url, created.key) as user:
            user.add("I like chess")
            with pytest.raises(RateLimited) as e:
                for _ in range(5):
                    user.list()
            assert e.value.retry_after >= 1
        admin.revoke_key(created.id)
        with MemserveClient(service.base_url, created.key) as user, pytest.raises(Unauthorized):
            user.list()
        with pytest.raises(NotFound):
            admin.revoke_key(uuid.uuid4())


async def test_async_client(service, keys):
    async with AsyncMemserveClient(service.base_url, keys.alice) as m:
        a = await m.add("My bike is a red Cannondale")
        assert a.user_id == "alice"
        assert (await m.get(a.id)).content == a.content
        assert (await m.update(a.id, tags=["bike"])).tags == ["bike"]
        assert (await m.search("what bicycle do I have")).results[0].id == a.id
        ctx = await m.context("tell me about my bike")
        assert a.id in {x.id for x in ctx.memories}
        assert (await m.history(a.id)).events[0].event == "ADD"
        assert any(x.id == a.id for x in (await m.list()).memories)
        with pytest.raises(Forbidden):
            await m.search("bike", user_id="bob")
        await m.delete(a.id)
        with pytest.raises(NotFound):
            await m.delete(a.id)
        assert (await m.health()).status == "ok"


def test_export_import_chat_and_tenant_settings_over_http(service, keys, uid, fake_llm):
    """The streamed export of one user loads into another (in chunks); the chat proxy's
    answer and stream and its usage; a fresh tenant's admin changes its settings."""
    with MemserveClient(service.base_url, keys.service) as m:
        for text in ("I grow tomatoes", "I speak Finnish", "I drive a tram"):
            m.add(text, user_id=uid)
        m.set_fact("work", "job", "tram driver", user_id=uid)
        records = list(m.export(user_id=uid))
        assert [r["kind"] for r in records][:: len(records) - 1] == ["header", "end"]
        reports = m.import_all(records, user_id=uid + "_copy", chunk_records=2)
        assert sum(r.imported.memories for r in reports) == 3 and len(reports) > 1
        copied = {x.content for x in m.list(user_id=uid + "_copy").memories}
        assert copied == {"I grow tomatoes", "I speak Finnish", "I drive a tram"}
        answer = m.chat([("user", "what do I grow?")], user=uid, session_id="c2")
        streamed = list(m.chat_stream([("user", "and what do I speak?")], user=uid))
        assert answer["choices"][0]["message"]["content"] and streamed
        assert sum(u.requests for u in m.chat_usage().usage) >= 2
    tenant = "client_" + secrets.token_hex(4)
    admin_key = service.add_key("msk_" + secrets.token_hex(16), tenant, "admin")
    with MemserveClient(service.base_url, admin_key) as admin:
        view = admin.patch_tenant_settings({"quotas": {"max_facts_per_user": 3}})
        assert isinstance(view, TenantSettingsView) and view.tenant_id == tenant
        assert admin.tenant_settings().effective.quotas.max_facts_per_user == 3
        assert [c.version for c in admin.tenant_settings_history().changes] == [view.version]
        assert admin.dead_letters().dead_letters == []
