"""Export a user with the CLI, import into a fresh tenant with the CLI: same search results."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

FACTS = [
    "Moved from Porto to Berlin in 2021",
    "Has a border collie named Pixel",
    "Training for a half marathon in April",
    "Dislikes coriander",
    "Works night shifts as an ICU nurse",
]
QUERIES = ["where does she live", "pets", "running race", "food she avoids", "job"]


def cli(service, key: str, *args: str) -> str:
    cmd = [sys.executable, "-m", "serve_app", *args, "--url", service.base_url, "--key", key]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ranked(api, uid: str, query: str) -> list[str]:
    r = api.post("/v1/search", json={"user_id": uid, "query": query, "top_k": 3})
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["results"]]


def test_cli_export_import_into_a_fresh_tenant(service, api, keys, uid, tmp_path):
    items = [{"content": f, "type": "fact", "tags": ["bio"]} for f in FACTS]
    assert api.post("/v1/memories/batch", json={"user_id": uid, "items": items}).status_code == 201
    out = tmp_path / "export.jsonl"
    cli(service, keys.service, "export", "--user", uid, "--out", str(out))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[-1] == {"kind": "end", "memories": 5, "facts": 0, "history": 5}

    summary = json.loads(
        cli(service, keys.service_t2, "import", "--user", uid, str(out), "--chunk-bytes", "1500")
    )
    assert summary["memories"] == 5 and summary["chunks"] > 1  # split under the body limit
    t2 = api.__class__(
        base_url=service.base_url,
        timeout=30,
        headers={"Authorization": f"Bearer {keys.service_t2}"},
    )
    with t2:
        # the answer to each query is the same memory; lower ranks of unrelated memories may
        # differ here (lexical statistics include the other e2e tests' memories of the
        # source tenant); tests/serve_app/services/test_portability.py checks whole rankings
        for q, want in zip(QUERIES, FACTS, strict=True):
            assert ranked(t2, uid, q)[0] == ranked(api, uid, q)[0] == want, q
    # the source tenant is untouched and still has exactly its five
    assert len(api.get("/v1/memories", params={"user_id": uid}).json()["memories"]) == 5


def test_export_is_isolated(service, keys, uid):
    from tests.e2e.conftest import client_for

    with client_for(service, keys.alice) as alice:
        assert alice.get("/v1/export", params={"user_id": "bob"}).status_code == 403
    with client_for(service, keys.service_t2) as other:
        r = other.get("/v1/export", params={"user_id": uid})
        assert r.status_code == 200 and r.text.splitlines()[-1] == (
            '{"kind":"end","memories":0,"facts":0,"history":0}'
        )


@pytest.fixture(scope="module")
def small_tenant(service):
    """A service key of a tenant of its own whose quotas are 2 memories and 1 fact per user."""
    from tests.e2e.conftest import client_for

    admin_key = service.add_key(
        "msk_" + secrets.token_hex(16), "t_" + secrets.token_hex(4), "admin"
    )
    with client_for(service, admin_key) as admin:
        quotas = {"max_memories_per_user": 2, "max_facts_per_user": 1}
        r = admin.patch("/v1/admin/tenant/settings", json={"quotas": quotas})
        assert r.status_code == 200, r.text
        r = admin.post("/v1/admin/keys", json={"role": "service"})
        assert r.status_code == 201, r.text
    with client_for(service, r.json()["key"]) as client:
        yield client


def jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_import_is_all_or_nothing_over_http(api, uid):
    fine = {"kind": "memory", "content": "Keeps bees on the roof"}
    bad = {"kind": "memory", "content": "x", "confidence": 7}  # was a 500
    fact = {"kind": "fact", "category": "profile", "key": "city", "value": "Ghent"}
    r = api.post("/v1/import", params={"user_id": uid}, content=jsonl(fine, fact, bad, fine))
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("line 3:"), r.text
    assert api.get("/v1/memories", params={"user_id": uid}).json()["memories"] == []
    assert api.get("/v1/facts", params={"user_id": uid}).json()["facts"] == []
    many = jsonl(*({"memory": f"m{i}"} for i in range(5001)))
    r = api.post("/v1/import", params={"user_id": uid}, content=many)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large", r.text
    session = {
        **fine,
        "scope": "session",
        "session_id": "s1",
        "status": "archived",
        "created_at": "2024-02-02T09:00:00+00:00",
    }
    r = api.post("/v1/import", params={"user_id": uid}, content=jsonl(session, fact))
    assert r.status_code == 200 and r.json()["imported"]["memories"] == 1, r.text
    [m] = api.get("/v1/memories", params={"user_id": uid}).json()["memories"]
    assert (m["scope"], m["expires_at"], m["status"]) == ("session", None, "archived")
    assert m["created_at"].startswith("2024-02-02")


def test_quotas_refuse_import_and_facts_with_403_writing_nothing(small_tenant, uid):
    c = small_tenant
    three = jsonl(*({"kind": "memory", "content": f"note {i}"} for i in range(3)))
    r = c.post("/v1/import", params={"user_id": uid}, content=three)
    assert r.status_code == 403 and r.json()["error"]["code"] == "quota_exceeded", r.text
    assert c.get("/v1/memories", params={"user_id": uid}).json()["memories"] == []
    put = {"user_id": uid, "category": "profile", "key": "city", "value": "Ghent"}
    assert c.put("/v1/facts", json=put).status_code == 200
    r = c.put("/v1/facts", json={**put, "key": "country", "value": "BE"})
    assert r.status_code == 403 and "fact quota" in r.json()["error"]["message"], r.text
