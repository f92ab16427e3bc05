"""The Python client (sync and async) against the real service: every call, typed results."""

from __future__ import annotations

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
from serve_app.schemas import ContextResponse, Memory, SearchResponse

pytestmark = pytest.mark.e2e


def test_sync_client_covers_the_api(service, keys, uid):
    with MemserveClient(service.base_url, keys.service) as m:
        assert m.health() == {"status": "ok"} and m.ready()["status"] == "ready"
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
        assert turns["accepted"] == 1
        assert m.end_session("c1", user_id=uid)["session_id"] == "c1"
        assert "facts" in m.facts(user_id=uid)
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
        assert (await m.health())["status"] == "ok"
