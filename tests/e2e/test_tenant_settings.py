"""Tenant settings over the real service (Ray, real extractor, scripted LLM): a tenant's
admin key sets its extraction guidance and the extractor replica uses it at once (a
change made through the Ingress reaches the other process by NOTIFY); ``custom_categories``
on a mem0 add become the memories' categories; other tenants are untouched."""

from __future__ import annotations

import os
import secrets

import pytest

from serve_app.testing.llm_server import extraction, memory
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e
URL = "/v1/admin/tenant/settings"


@pytest.fixture(scope="module")
def tenant(service):
    """A tenant of its own: (admin client, service key)."""
    name = "t_" + secrets.token_hex(4)
    admin_key = service.add_key("msk_" + secrets.token_hex(16), name, "admin")
    with client_for(service, admin_key) as admin:
        r = admin.post("/v1/admin/keys", json={"role": "service"})
        assert r.status_code == 201, r.text
        yield admin, r.json()["key"]


@pytest.fixture(scope="module")
def mem0_for(service, tmp_path_factory):
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(tmp_path_factory.mktemp("mem0"))
    import mem0

    return lambda key: mem0.MemoryClient(api_key=key, host=f"{service.base_url}/mem0")


def system_of(call: dict) -> str:
    return "\n".join(m["content"] for m in call["messages"] if m["role"] == "system")


def prompt_for(fake_llm, marker: str) -> str:
    calls = [c for c in fake_llm.calls("extract") if marker in str(c["messages"])]
    assert calls, f"no extraction call mentions {marker}"
    return system_of(calls[-1])


def test_guidance_reaches_the_extractor_at_once_and_categories_tag(
    tenant, keys, mem0_for, fake_llm, uid
):
    admin, service_key = tenant
    guidance = {
        "custom_instructions": "RULE-ONE: be terse",
        "custom_categories": [{"travel": "trips"}],
    }
    r = admin.patch(URL, json={"extraction": guidance})
    assert r.status_code == 200 and r.json()["version"] == 1, r.text
    c = mem0_for(service_key)
    fake_llm.add_rule(
        f"oslo-{uid}",
        extraction([{**memory(f"The user flies to Oslo ({uid})"), "tags": ["travel", "misc"]}]),
    )
    added = c.add([{"role": "user", "content": f"I fly to oslo-{uid} on Friday"}], user_id=uid)
    assert added["status"] == "SUCCEEDED", added
    prompt = prompt_for(fake_llm, f"oslo-{uid}")
    assert "RULE-ONE: be terse" in prompt and "- travel: trips" in prompt
    [got] = c.get_all(filters={"user_id": uid})["results"]
    assert got["categories"] == ["travel"]  # the category, not the model's other tag

    # a change through the Ingress is what the extractor replica uses for the next job
    r = admin.patch(URL, json={"extraction": {"custom_instructions": "RULE-TWO: be kind"}})
    assert r.status_code == 200 and r.json()["version"] == 2, r.text
    fake_llm.add_rule(
        f"tea-{uid}", extraction([{**memory(f"The user likes tea ({uid})"), "tags": ["food"]}])
    )
    own = [{"food": "what the user eats and drinks"}]
    added = c.add(
        [{"role": "user", "content": f"I like tea-{uid}"}], user_id=uid, custom_categories=own
    )
    assert added["status"] == "SUCCEEDED", added
    prompt = prompt_for(fake_llm, f"tea-{uid}")
    assert "RULE-TWO: be kind" in prompt and "RULE-ONE" not in prompt
    assert "- food: what the user eats and drinks" in prompt and "- travel" not in prompt
    tea = [m for m in c.get_all(filters={"user_id": uid})["results"] if "tea" in m["memory"]]
    assert [m["categories"] for m in tea] == [["food"]]
    assert tea[0]["metadata"]["custom_categories"] == own

    # another tenant's extraction prompt carries none of it
    other = mem0_for(keys.service)
    fake_llm.add_rule(f"jazz-{uid}", extraction([memory(f"The user likes jazz ({uid})")]))
    assert (
        other.add([{"role": "user", "content": f"I like jazz-{uid}"}], user_id=uid)["status"]
        == "SUCCEEDED"
    )
    prompt = prompt_for(fake_llm, f"jazz-{uid}")
    assert "RULE-TWO" not in prompt and "what the user eats" not in prompt

    history = admin.get(URL + "/history").json()["changes"]
    assert [h["version"] for h in history] == [2, 1]
    assert history[0]["changes"] == [
        {
            "field": "extraction.custom_instructions",
            "old": "RULE-ONE: be terse",
            "new": "RULE-TWO: be kind",
        }
    ]


def test_only_the_tenants_admin_key(service, tenant, keys):
    _, service_key = tenant
    for key in (service_key, keys.alice, keys.service):
        with client_for(service, key) as c:
            assert c.get(URL).status_code == 403
            r = c.patch(URL, json={"chat_models": ["x"]})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
    with client_for(service, None) as anon:
        assert anon.get(URL).status_code == 401
    with client_for(service, service.admin_key) as default_admin:
        assert default_admin.get(URL).json()["tenant_id"] == "default"


def test_chat_models_change_for_the_next_request(service, tenant, fake_llm):
    admin, service_key = tenant
    ask = {"user": "ann", "model": "fake", "messages": [{"role": "user", "content": "hi"}]}
    with client_for(service, service_key) as c:
        assert c.post("/v1/chat/completions", json=ask).status_code == 200
        assert admin.patch(URL, json={"chat_models": ["other-model"]}).status_code == 200
        codes = {c.post("/v1/chat/completions", json=ask).status_code for _ in range(5)}
        assert codes == {422}
        assert admin.patch(URL, json={"chat_models": None}).status_code == 200
        assert c.post("/v1/chat/completions", json=ask).status_code == 200
