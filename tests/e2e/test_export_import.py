"""Export a user with the CLI, import into a fresh tenant with the CLI: same search results."""

from __future__ import annotations

import json
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

    summary = json.loads(cli(service, keys.service_t2, "import", "--user", uid, str(out),
                             "--chunk-bytes", "1500"))  # fmt: skip
    assert summary["memories"] == 5 and summary["chunks"] > 1  # split under the body limit
    t2 = api.__class__(base_url=service.base_url, timeout=30,
                       headers={"Authorization": f"Bearer {keys.service_t2}"})  # fmt: skip
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
