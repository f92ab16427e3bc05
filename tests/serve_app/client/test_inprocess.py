"""The async client against the app in process (real Postgres, encoder and retriever; the
fake LLM as the chat upstream): each new call's answer reads into its typed model, the
export streams and loads back, and errors are the client's typed ones."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.client import AsyncMemserveClient, Forbidden, InvalidRequest, MemserveError
from serve_app.responses import (
    ConsolidationReport,
    DeadLetterList,
    Fact,
    FactList,
    ImportReport,
    MemoryBatchResult,
    ModelList,
    QueuedJob,
    Retried,
    SessionEnded,
    SessionList,
    SessionRef,
    SessionStatus,
    SettingsHistory,
    TenantSettingsView,
    TurnsAccepted,
    UsageResponse,
    UserList,
)
from serve_app.schemas import DeletedCount, Memory
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_app, in_process_services

SERVICE = "msk_client_inproc_service_key_0123456"
ADMIN = "msk_client_inproc_admin_key_0123456789"


@pytest.fixture
async def clients(fresh_db, encoder, llm):
    """(service-key client, admin-key client) on one in-process app."""
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE, admin_key=ADMIN).with_(
        llm={"base_url": llm.url, "model": "fake"}
    )
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):

        def client(key: str) -> AsyncMemserveClient:
            return AsyncMemserveClient("http://t", key, transport=httpx.ASGITransport(app=app))

        async with client(SERVICE) as service, client(ADMIN) as admin:
            yield service, admin


async def test_sessions_facts_and_users_are_typed(clients):
    m, _ = clients
    turns = await m.add_turns("s1", [("user", "I moved to Lisbon")], user_id="ana")
    assert isinstance(turns, TurnsAccepted) and turns.accepted == 1
    status = await m.session_status("s1", user_id="ana")
    assert isinstance(status, SessionStatus) and status.turns == 1 and not status.ended
    ended = await m.end_session("s1", user_id="ana")
    assert isinstance(ended, SessionEnded) and ended.session_id == "s1"
    assert (await m.session_status("s1", user_id="ana")).ended
    first = await m.set_fact("location", "city", "Porto", user_id="ana")
    assert isinstance(first, Fact) and first.value == "Porto" and first.active
    await m.set_fact("location", "city", "Lisbon", user_id="ana")
    now = await m.facts(user_id="ana")
    assert isinstance(now, FactList) and [f.value for f in now.facts] == ["Lisbon"]
    every = await m.facts(user_id="ana", include_inactive=True, category="location")
    assert sorted(f.value for f in every.facts) == ["Lisbon", "Porto"]
    assert (await m.delete_facts(user_id="ana", category="location")) == DeletedCount(deleted=2)
    assert (await m.facts(user_id="ana")).facts == []
    await m.add("I like green tea", user_id="ana")
    job = await m.add("I moved to Rome", user_id="ana", infer=True)  # 202: a job
    assert isinstance(job, QueuedJob) and job.status == "queued"
    assert (await m.session_status(job.job_id, user_id="ana")).turns == 1
    batch = await m.add_batch(
        [{"content": "I swim"}, {"content": "I ski", "infer": True}], user_id="ana"
    )
    assert isinstance(batch, MemoryBatchResult) and [x.content for x in batch.memories] == [
        "I swim"
    ]
    assert len(batch.jobs) == 1 and batch.jobs[0].job_id != job.job_id
    users = await m.users(limit=10)
    assert isinstance(users, UserList) and "ana" in {u.user_id for u in users.users}
    sessions = await m.user_sessions("ana")
    assert isinstance(sessions, SessionList)
    assert {x.session_id for x in sessions.sessions} == {"s1", job.job_id, batch.jobs[0].job_id}
    with pytest.raises(InvalidRequest):
        await m.set_fact("location", "city", "")  # no user, empty value: 4xx, typed


async def test_export_streams_and_imports_back(clients):
    m, _ = clients
    for text in ("I play the cello", "My sister is Eva", "I am vegetarian"):
        await m.add(text, user_id="src", tags=["t"])
    await m.set_fact("diet", "style", "vegetarian", user_id="src")
    records = [r async for r in m.export(user_id="src")]
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "header" and kinds[-1] == "end" and kinds.count("memory") == 3
    assert records[-1]["memories"] == 3 and records[-1]["facts"] == 1
    report = await m.import_(records, user_id="copy")
    assert isinstance(report, ImportReport) and report.imported.memories == 3
    assert report.imported.facts == 1 and len(report.memory_ids) == 3
    copied = await m.list(user_id="copy")
    assert sorted(x.content for x in copied.memories) == sorted(
        r["content"] for r in records if r["kind"] == "memory"
    )
    # in chunks: each request holds few records, the total is the same
    reports = await m.import_all(records, user_id="chunked", chunk_records=2)
    assert len(reports) > 2 and sum(r.imported.memories for r in reports) == 3
    assert len((await m.list(user_id="chunked")).memories) == 3
    with pytest.raises(InvalidRequest):
        await m.import_(['{"kind": "memory"}'], user_id="bad")  # no content: 422, nothing
    assert (await m.list(user_id="bad")).memories == []


async def test_chat_stream_and_usage(clients, llm):
    m, admin = clients
    answer = await m.chat([("user", "hello")], model="fake", user="ana", session_id="c1")
    assert answer["choices"][0]["message"]["content"]
    chunks = [c async for c in m.chat_stream([("user", "hi again")], model="fake", user="ana")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == answer["choices"][0]["message"]["content"]
    usage = await m.chat_usage()
    assert isinstance(usage, UsageResponse) and sum(u.requests for u in usage.usage) == 2
    assert sum(u.requests for u in (await admin.chat_usage()).usage) == 2


async def test_dead_letters_are_typed_and_retried(clients, fresh_db):
    m, admin = clients
    await m.add_turns("s9", [("user", "I keep bees")], user_id="dora")
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await conn.execute(
            "UPDATE session_turns SET dead_at = now(), extract_attempts = 3,"
            " extract_error = 'http_4xx: refused' WHERE user_id = 'dora'"
        )
    [dead] = (await admin.dead_letters(user_id="dora")).dead_letters
    assert (dead.session_id, dead.turns, dead.attempts) == ("s9", 1, 3)
    assert dead.error == "http_4xx: refused"
    retried = await admin.retry_dead_letters(user_id="dora")
    assert retried == Retried(retried=[SessionRef(user_id="dora", session_id="s9")])
    assert (await admin.dead_letters(user_id="dora")).dead_letters == []


async def test_admin_calls_are_typed(clients):
    m, admin = clients
    view = await admin.tenant_settings()
    assert isinstance(view, TenantSettingsView) and view.version == 0
    view = await admin.patch_tenant_settings({"quotas": {"max_facts_per_user": 7}})
    assert view.version == 1 and view.effective.quotas.max_facts_per_user == 7
    view = await admin.patch_tenant_settings({"chat_models": ["fake"]}, if_match=1)
    assert view.version == 2 and view.settings["quotas"] == {"max_facts_per_user": 7}
    with pytest.raises(MemserveError) as stale:
        await admin.replace_tenant_settings({}, if_match=1)  # moved on: 409
    assert stale.value.status == 409
    view = await admin.replace_tenant_settings({}, if_match=2)
    assert view.version == 3 and view.settings == {}
    history = await admin.tenant_settings_history(limit=5, before=3)
    assert isinstance(history, SettingsHistory) and [c.version for c in history.changes] == [2, 1]
    models = await admin.models()
    assert isinstance(models, ModelList) and [x.state for x in models.models] == ["active"]
    assert isinstance(await admin.dead_letters(limit=5), DeadLetterList)
    assert (await admin.retry_dead_letters(user_id="nobody")) == Retried(retried=[])
    a = await m.add("I like jazz", user_id="ana")
    assert isinstance(a, Memory)
    report = await admin.consolidate("ana")
    assert isinstance(report, ConsolidationReport) and report.merged == 0
    with pytest.raises(Forbidden):
        await m.tenant_settings()
    with pytest.raises(InvalidRequest):
        await admin.erase_tenant("not-the-tenant")
    assert (await m.get(a.id, user_id="ana")).content == "I like jazz"
    erased = await admin.erase_tenant("default")
    assert isinstance(erased, DeletedCount) and erased.deleted >= 1 and erased.removed
    assert (await m.list(user_id="ana")).memories == []
