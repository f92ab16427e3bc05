"""No input yields a 5xx, over HTTP on the real service: every operation of the live
/openapi.json gets the hostile cases of tests/hostile_input.py (NUL and unpaired
surrogates everywhere, deep nesting, out-of-range and non-ASCII integers in query,
body and If-Match, wrong JSON types, wrong-shaped mem0 filters), sent with the keys
of a fresh tenant (service key; admin key on /v1/admin). Each answer is a 4xx in the
error shape (or below 500 where a number may be served) and the tenant's rows are
unchanged. Strangers: the same routes without a key are 401 before the body is read.
"""

from __future__ import annotations

import secrets

import httpx
import pytest

from tests.hostile_input import cases, row_counts, verdict
from tests.security.conftest import http
from tests.security.report import CASES, SERVER_ERRORS

pytestmark = pytest.mark.e2e
# Public by design: probes, and the MCP sign-in discovery document (RFC 9728).
PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/.well-known/oauth-protected-resource"),
    ("GET", "/.well-known/oauth-protected-resource/mcp"),
    ("GET", "/.well-known/oauth-protected-resource/mcp/tenant"),  # a tenant's sign-in
}


@pytest.fixture(scope="module")
def fuzz_tenant(sec_service):
    tenant = "hostile_" + secrets.token_hex(3)
    service = sec_service.add_key("msk_" + secrets.token_hex(16), tenant, "service")
    admin = sec_service.add_key("msk_" + secrets.token_hex(16), tenant, "admin")
    with http(sec_service, service) as c:
        r = c.post("/v1/memories", json={"user_id": "victim", "content": "Victim likes jazz"})
        assert r.status_code == 201, r.text
        memory_id = r.json()["id"]
        fact = {"user_id": "victim", "category": "diet", "key": "kind", "value": "vegan"}
        assert c.put("/v1/facts", json=fact).status_code == 200
    return tenant, service, admin, {"memory_id": memory_id}


def test_no_hostile_input_gets_a_5xx_or_changes_anything(sec_service, fuzz_tenant):
    tenant, service, admin, path_values = fuzz_tenant
    spec = httpx.get(f"{sec_service.base_url}/openapi.json").json()
    before = row_counts(sec_service.dsn, tenant)
    wrong: list[str] = []
    n = 0
    with httpx.Client(base_url=sec_service.base_url, timeout=60) as c:
        for case in cases(spec, path_values, PUBLIC):
            key = admin if "/admin/" in case.url else service
            r = c.request(case.method, case.url, content=case.body, headers=case.http_headers(key))
            CASES[f"hostile input: {case.kind}"] += 1
            n += 1
            if r.status_code >= 500:
                SERVER_ERRORS.append(f"{case.label} -> {r.status_code}")
            if (problem := verdict(case, r.status_code, r.text)) is not None:
                wrong.append(problem)
    assert n >= 1500
    assert not wrong, f"{len(wrong)} wrong answers:\n" + "\n".join(wrong[:40])
    assert row_counts(sec_service.dsn, tenant) == before


def test_strangers_get_401_before_their_body_is_read(sec_service):
    """Without a key (or with a malformed one) every operation, /mcp and an unknown path
    answer 401 to a body that is not JSON, one over the size limit and one nested 100k
    deep: had the body been read first, those would be 400, 413 and 422."""
    spec = httpx.get(f"{sec_service.base_url}/openapi.json").json()
    ops = [
        (method.upper(), path.replace("{", "").replace("}", ""))
        for path, item in spec["paths"].items()
        for method in item
    ]
    ops += [("POST", "/mcp"), ("POST", "/no/such/route")]
    bodies = [b'{"user_id": "u", "content": ', b"x" * 2_000_000, b"[" * 100_000]
    auths = [{}, {"authorization": "Basic abc"}, {"authorization": "Bearer"}]
    with httpx.Client(base_url=sec_service.base_url, timeout=60) as c:
        # One body and header per operation, in turn (each refusal is held 0.5 s); the
        # in-process test sends every combination.
        for i, (method, path) in enumerate(o for o in ops if o not in PUBLIC):
            headers = {"content-type": "application/json"} | auths[i % len(auths)]
            r = c.request(method, path, content=bodies[i % len(bodies)], headers=headers)
            CASES["stranger: no/malformed key with a bad body"] += 1
            # 429 once the address's failed-lookup budget is spent: also unread.
            assert r.status_code in (401, 429), (method, path, r.status_code, r.text)
            assert r.json()["error"]["code"] in ("unauthorized", "rate_limited")
