"""Events out of the real service (Ray Serve over HTTP): the feed shows each change once
and in order, a webhook subscription delivers the same events, signed, to a receiver on
127.0.0.1 from the Extractor tier's dispatcher, SSRF targets are refused, and after a
forget neither the feed nor later deliveries carry the user's content."""

from __future__ import annotations

import time

import pytest
from standardwebhooks import Webhook

from serve_app.testing.webhook_receiver import Receiver
from tests.e2e.conftest import client_for


@pytest.fixture
def admin(service):
    with client_for(service, service.admin_key) as c:
        yield c


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def feed(api, uid: str, **params) -> list[dict]:
    r = api.get("/v1/events", params={"user_id": uid, "limit": 500, **params})
    assert r.status_code == 200, r.text
    return r.json()["events"]


def wait_for(check, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_feed_and_signed_webhooks_end_to_end(api, admin, receiver, uid):
    r = admin.post("/v1/admin/webhooks", json={"url": "http://10.0.0.1/x"})
    assert r.status_code == 422 and "refused" in r.text  # SSRF
    r = admin.post("/v1/admin/webhooks", json={"url": receiver.url("/ok"), "include_content": True})
    assert r.status_code == 201, r.text
    hook = r.json()
    try:
        r = api.post(
            "/v1/memories/batch",
            json={
                "user_id": uid,
                "items": [
                    {"content": "likes green tea", "infer": False},
                    {"content": "lives in Oslo", "infer": False},
                ],
            },
        )
        assert r.status_code == 201, r.text
        first = r.json()["memories"][0]["id"]
        r = api.patch(
            f"/v1/memories/{first}", params={"user_id": uid}, json={"content": "likes oolong tea"}
        )
        assert r.status_code == 200, r.text
        assert api.delete(f"/v1/memories/{first}", params={"user_id": uid}).status_code == 204

        wait_for(lambda: len(feed(api, uid)) == 4)
        events = feed(api, uid, include_content="true")
        assert [e["type"] for e in events] == [
            "memory.added",
            "memory.added",
            "memory.updated",
            "memory.deleted",
        ]
        assert [e["content"] for e in events] == [None, "lives in Oslo", None, None]

        def mine() -> list[dict]:
            bodies = Webhook(hook["secret"]).verify  # raises on a bad signature
            got = [bodies(x.body, x.headers) for x in receiver.at("/ok")]
            return [b for b in got if b["data"]["user_id"] == uid]

        wait_for(lambda: len({b["data"]["id"] for b in mine()}) == 4)
        delivered = list(dict.fromkeys(b["data"]["id"] for b in mine()))
        assert delivered == [e["id"] for e in events]  # in order, each event once (deduped)

        r = api.delete("/v1/memories", params={"user_id": uid})
        assert r.status_code == 200, r.text
        after = feed(api, uid, include_content="true")
        assert [(e["type"], e["content"]) for e in after] == [("forget.completed", None)]
        wait_for(lambda: any(b["type"] == "forget.completed" for b in mine()))
        assert not any("Oslo" in (b["data"].get("content") or "") for b in mine()[4:])
        log = admin.get(f"/v1/admin/webhooks/{hook['id']}/deliveries").json()["deliveries"]
        assert log and all(d["status"] in ("delivered", "pending") for d in log)
    finally:
        assert admin.delete(f"/v1/admin/webhooks/{hook['id']}").status_code == 204
