"""/v1/admin/webhooks in-process (no Ray) with the Python client: real Postgres behind the
app, a real receiver on 127.0.0.1 and the dispatcher sending to it. The secret is
shown once; only an admin key manages subscriptions, of its own tenant; SSRF targets
and unknown types are a 422 that creates nothing; the delivery log and replay work."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from standardwebhooks import Webhook

from serve_app.bootstrap import bootstrap
from serve_app.client import AsyncMemserveClient, Forbidden, InvalidRequest, NotFound
from serve_app.settings import Settings
from serve_app.store.webhooks import WebhookStore
from serve_app.testing.inprocess import in_process_app, in_process_services
from serve_app.testing.webhook_receiver import Receiver
from serve_app.webhooks.dispatcher import Dispatcher

SERVICE = "msk_webhooks_api_service_key_0123456789"


@pytest.fixture
async def api(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE).with_(
        webhooks={"allowed_networks": ["127.0.0.1/32"], "interval_s": 0, "timeout_s": 2.0}
    )
    boot = bootstrap(settings, fresh_db)
    receiver = Receiver().start()
    async with in_process_services(settings, boot.model, fresh_db, encoder) as services:
        admin, _ = await services.keys.create("default", "admin")
        other, _ = await services.keys.create("acme", "admin")
        async with in_process_app(settings, services) as app:

            def client(key: str) -> AsyncMemserveClient:
                return AsyncMemserveClient("http://t", key, transport=httpx.ASGITransport(app=app))

            async with client(admin) as a, client(SERVICE) as s, client(other) as o:
                try:
                    yield a, s, o, services, settings, receiver
                finally:
                    receiver.stop()


async def test_webhook_admin_lifecycle(api):
    admin, service, other, services, settings, receiver = api
    made = await admin.create_webhook(
        receiver.url("/ok"), types=["memory.added"], include_content=True
    )
    assert made.secret.startswith("whsec_") and made.types == ["memory.added"]
    listed = (await admin.webhooks()).webhooks
    assert [w.id for w in listed] == [made.id]
    assert "secret" not in listed[0].model_dump()  # shown once only
    assert (await other.webhooks()).webhooks == []  # another tenant's admin sees none
    with pytest.raises(NotFound):
        await other.get_webhook(made.id)
    with pytest.raises(Forbidden):
        await service.webhooks()
    for bad in (
        {"url": "http://169.254.169.254/x"},
        {"url": "http://10.1.2.3/"},
        {"url": receiver.url("/ok"), "types": ["memory.eaten"]},
        {"url": "file:///etc/passwd"},
    ):
        with pytest.raises(InvalidRequest):
            await admin.create_webhook(**bad)
    assert len((await admin.webhooks()).webhooks) == 1  # nothing made

    await service.add("likes tea", user_id="alice")
    await service.set_fact("food", "drink", "tea", user_id="alice")  # filtered out by type
    dispatcher = Dispatcher.from_settings(services.webhooks.store.pool, settings.webhooks)
    try:
        for _ in range(100):
            await dispatcher.run_once()
            await dispatcher.drain()
            if receiver.at("/ok"):
                break
            await asyncio.sleep(0.05)
    finally:
        await dispatcher.stop()
    (got,) = receiver.at("/ok")
    body = Webhook(made.secret).verify(got.body, got.headers)
    assert body["type"] == "memory.added" and body["data"]["content"] == "likes tea"
    log = (await admin.webhook_deliveries(made.id)).deliveries
    assert [(d.status, d.type, str(d.event_id)) for d in log] == [
        ("delivered", "memory.added", got.headers["webhook-id"])
    ]
    assert (await admin.replay_webhook(made.id)).replayed == 0

    off = await admin.update_webhook(made.id, enabled=False, types=[])
    assert off.enabled is False and off.types == []
    await admin.delete_webhook(made.id)
    with pytest.raises(NotFound):
        await admin.get_webhook(made.id)
    assert await WebhookStore(services.webhooks.store.pool).list("default") == []
