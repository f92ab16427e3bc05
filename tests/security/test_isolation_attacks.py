"""Randomized isolation attacks (hypothesis) over HTTP.

Two fresh tenants x three users (the same user names in both tenants), a
service key per tenant and a user key per user, memories in the user, session
and agent-tagged scopes, shared agent/org knowledge per tenant, and facts.
Every generated request (any endpoint, foreign ids, any filter and scope,
queries made of the victim's own words) must not return anything of a
principal other than the acting one (its tenant's shared knowledge aside),
must not answer 5xx, and must not change anything it is not allowed to.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from dataclasses import dataclass, field

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.conftest import http
from tests.security.report import CASES, LEAKS, SERVER_ERRORS

pytestmark = pytest.mark.e2e
USERS = ("u1", "u2", "u3")
SHARED = "@shared"
TOPICS = (
    "passport number and travel visa for the Lisbon trip",
    "salary negotiation and the new job offer",
    "blood test results and the doctor appointment",
)
MAX_EXAMPLES = 300


@dataclass(frozen=True)
class Key:
    tenant: str
    role: str  # service | user
    user: str | None
    secret: str


@dataclass
class Seed:
    id: str
    tenant: str
    owner: str  # user id, or SHARED
    token: str
    content: str
    session_id: str | None = None
    agent_id: str | None = None


@dataclass
class World:
    tenants: tuple[str, str]
    keys: list[Key]
    memories: list[Seed] = field(default_factory=list)
    facts: list[Seed] = field(default_factory=list)

    @property
    def items(self) -> list[Seed]:
        return self.memories + self.facts

    def forbidden(self, tenant: str, acting: str | None) -> list[Seed]:
        """What the acting principal must never see: everything not its own or its shared."""
        return [
            s
            for s in self.items
            if not (s.tenant == tenant and (s.owner == SHARED or s.owner == acting))
        ]


def token() -> str:
    return "tok" + secrets.token_hex(6)


@pytest.fixture(scope="module")
def world(sec_service) -> World:
    svc = sec_service
    run = secrets.token_hex(3)
    tenants = (f"sec_a_{run}", f"sec_b_{run}")
    keys: list[Key] = []
    for t in tenants:
        keys.append(
            Key(t, "service", None, svc.add_key("msk_" + secrets.token_hex(16), t, "service"))
        )
        for u in USERS:
            keys.append(
                Key(t, "user", u, svc.add_key("msk_" + secrets.token_hex(16), t, "user", u))
            )
    w = World(tenants, keys)
    for t in tenants:
        service_key = next(k for k in keys if k.tenant == t and k.role == "service")
        with http(svc, service_key.secret) as c:
            for i, u in enumerate(USERS):
                for j, (session, agent) in enumerate(
                    ((None, None), ("s1", None), (None, "agent1"))
                ):
                    tok = token()
                    content = f"{u} {TOPICS[(i + j) % 3]} {tok}"
                    body = {
                        "user_id": u,
                        "content": content,
                        "tags": [tok, "shared-tag"],
                        "metadata": {"tok": tok, "kind": "secret"},
                    }
                    if session:
                        body["session_id"] = session
                    if agent:
                        body["agent_id"] = agent
                    r = c.post("/v1/memories", json=body)
                    assert r.status_code == 201, r.text
                    w.memories.append(Seed(r.json()["id"], t, u, tok, content, session, agent))
            for scope, extra in (("org", {}), ("agent", {"agent_id": "agent1"})):
                tok = token()
                content = f"company policy about {TOPICS[0]} {tok}"
                r = c.post("/v1/memories", json={"scope": scope, "content": content, **extra})
                assert r.status_code == 201, r.text
                w.memories.append(Seed(r.json()["id"], t, SHARED, tok, content, None, "agent1"))
    with psycopg.connect(svc.dsn, autocommit=True) as conn:
        for t in tenants:
            for u in USERS:
                tok = token()
                fid = uuid.uuid4()
                conn.execute(
                    "INSERT INTO facts (id, tenant_id, user_id, category, key, value)"
                    " VALUES (%s,%s,%s,'personal','passport',%s)",
                    (fid, t, u, f"passport {tok}"),
                )
                w.facts.append(Seed(str(fid), t, u, tok, f"passport {tok}"))
    return w


def user_ids() -> st.SearchStrategy[str | None]:
    return st.sampled_from([None, *USERS, "ghost", "@org", "@agent:agent1", "u1 ", "U1"])


def maybe(values) -> st.SearchStrategy:
    return st.one_of(st.none(), st.sampled_from(values))


@st.composite
def attacks(draw, w: World):
    key = draw(st.sampled_from(w.keys))
    claimed = draw(user_ids())
    victim = draw(st.sampled_from(w.items))
    kind = draw(
        st.sampled_from(
            [
                "get",
                "history",
                "patch",
                "delete",
                "list",
                "delete_scope",
                "search",
                "context",
                "facts",
                "session",
                "batch_shared",
                "chat",
            ]
        )
    )
    params = {} if claimed is None else {"user_id": claimed}
    filters = {
        "agent_id": draw(maybe(["agent1", "agent2", victim.agent_id or "agent1"])),
        "session_id": draw(maybe(["s1", "s2"])),
    }
    filters = {k: v for k, v in filters.items() if v is not None}
    query = draw(
        st.sampled_from(
            [victim.content, victim.token, f"what about {victim.token}?", TOPICS[0], "passport"]
        )
    )
    mid = victim.id if victim in w.memories else str(uuid.uuid4())
    if kind == "get":
        return key, claimed, ("GET", f"/v1/memories/{mid}", params, None)
    if kind == "history":
        return key, claimed, ("GET", f"/v1/memories/{mid}/history", params, None)
    if kind in ("patch", "delete"):
        path = f"/v1/memories/{mid}"
        if victim not in w.forbidden(key.tenant, acting_user(key, claimed, path)):
            path = f"/v1/memories/{uuid.uuid4()}"  # only attacks: never the caller's own
        if kind == "delete":
            return key, claimed, ("DELETE", path, params, None)
        changes = [{"content": "pwned"}, {"tags": ["pwned"]}, {"importance": 0.0}]
        body = draw(st.sampled_from([*changes, {"metadata": {"pwned": True}}]))
        return key, claimed, ("PATCH", path, params, body)
    if kind == "list":
        extra = draw(st.sampled_from([{}, {"type": "semantic"}, {"limit": 200}]))
        return key, claimed, ("GET", "/v1/memories", {**params, **filters, **extra}, None)
    if kind == "delete_scope":
        # Only requests that must delete nothing seeded: a user naming someone else, or a
        # service key acting for a user that has nothing.
        p = (
            {"user_id": "ghost"}
            if key.role == "service"
            else {"user_id": draw(st.sampled_from([u for u in USERS if u != key.user]))}
        )
        return key, p["user_id"], ("DELETE", "/v1/memories", {**p, **filters}, None)
    if kind == "search":
        body = {"query": query, **filters, **params}
        body.update(
            draw(
                st.sampled_from(
                    [
                        {},
                        {"tags": [victim.token]},
                        {"top_k": 100},
                        {"filters": {"metadata": {"tok": victim.token}}},
                        {"mode": "lexical"},
                        {"mode": "dense"},
                        {"threshold": -1.0},
                    ]
                )
            )
        )
        return key, claimed, ("POST", "/v1/search", None, body)
    if kind == "context":
        body = {"query": query, **filters, **params, "token_budget": 8000, "top_k": 100}
        if draw(st.booleans()):
            body["history"] = [{"role": "user", "content": victim.content}]
        return key, claimed, ("POST", "/v1/context", None, body)
    if kind == "facts":
        return key, claimed, ("GET", "/v1/facts", params, None)
    if kind == "session":
        return key, claimed, ("GET", f"/v1/sessions/{victim.session_id or 's1'}", params, None)
    if kind == "batch_shared":
        # A user key trying to sneak shared knowledge in (or anyone writing into a victim).
        body = {"items": [{"content": f"planted {uuid.uuid4()}", "scope": "org"}], **params}
        return key, claimed, ("POST", "/v1/memories/batch", None, body)
    body = {"model": "fake", "messages": [{"role": "user", "content": query}]}
    if claimed is not None:
        body["user"] = claimed
    return key, claimed, ("POST", "/v1/chat/completions", None, body)


def acting_user(key: Key, claimed: str | None, path: str) -> str | None:
    if key.role == "user":
        return key.user
    if claimed is None and path.startswith("/v1/memories/"):
        return SHARED  # by-id routes of a service key without user_id: shared memories
    return claimed


def visible_text(r) -> str:
    """The response without echoes of the attacker's own input (the searched query, and
    a context call's ``parts``: that query split into its sentences and clauses)."""
    try:
        data = r.json()
    except ValueError:
        return r.text
    if isinstance(data, dict):
        data.pop("search_query", None)
        data.pop("parts", None)
    return json.dumps(data)


def seed_state(svc, w: World) -> dict[str, tuple]:
    with psycopg.connect(svc.dsn) as conn:
        rows = conn.execute(
            "SELECT id::text, content, tags, metadata::text, importance FROM memory_items"
            " WHERE id = ANY(%s::uuid[])",
            ([s.id for s in w.memories],),
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


@pytest.fixture(scope="module")
def before(sec_service, world):
    return seed_state(sec_service, world)


def test_isolation_attacks(sec_service, world, before):
    clients = {k.secret: http(sec_service, k.secret) for k in world.keys}

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(attack=attacks(world))
    def attack_once(attack):
        key, claimed, (method, path, params, body) = attack
        r = clients[key.secret].request(method, path, params=params, json=body)
        CASES[f"isolation {method} {re.sub(r'/[0-9a-f-]{36}', '/{id}', path)}"] += 1
        if r.status_code >= 500:
            SERVER_ERRORS.append(f"isolation {method} {path} {params} {body} -> {r.status_code}")
        assert r.status_code < 500, (method, path, params, body, r.status_code, r.text)
        acting = acting_user(key, claimed, path)
        text = visible_text(r)
        for s in world.forbidden(key.tenant, acting):
            if s.token in text or s.id in text:
                LEAKS.append(f"{key.role}@{key.tenant} as {acting}: {method} {path} -> {s}")
                raise AssertionError(f"leak of {s} to {key} via {method} {path} {params} {body}")
        if r.status_code < 300 and method in ("PATCH", "DELETE") and path.count("/") == 3:
            target = path.rsplit("/", 1)[1]
            assert all(s.id != target for s in world.forbidden(key.tenant, acting)), r.text

    try:
        attack_once()
    finally:
        for c in clients.values():
            c.close()


def test_nothing_was_changed(sec_service, world, before):
    """No attack changed a seeded memory, and user keys never wrote shared knowledge."""
    assert seed_state(sec_service, world) == before
    with psycopg.connect(sec_service.dsn) as conn:
        by_users = conn.execute(
            "SELECT count(*) FROM memory_history h JOIN memory_items i ON i.id = h.memory_id"
            " WHERE i.tenant_id = ANY(%s) AND i.user_id IS NULL AND h.actor LIKE 'user:%%'",
            (list(world.tenants),),
        ).fetchone()[0]
    assert by_users == 0
