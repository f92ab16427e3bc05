"""One real service for all end-to-end tests, driven over HTTP."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import httpx
import pytest

from serve_app.testing.llm_server import FakeLLM
from serve_app.testing.service import ServiceProcess


@dataclass
class Keys:
    service: str  # tenant "default", service role (bootstrap key)
    service_t2: str  # tenant "t2", service role
    alice: str  # tenant "default", user key of alice
    bob: str  # tenant "default", user key of bob
    alice_t2: str  # tenant "t2", user key of a *different* alice


@pytest.fixture(scope="session")
def fake_llm():
    """The scripted LLM every e2e service talks to (extraction and chat upstream)."""
    server = FakeLLM().start()
    yield server
    server.stop()


# Short LLM timeouts/retries and a fast re-scan so outage tests finish quickly.
E2E_LLM_ENV = {
    "MEMSERVE_LLM_MODEL": "fake",
    "MEMSERVE_LLM_TIMEOUT_S": "3",
    "MEMSERVE_LLM_MAX_RETRIES": "1",
    "MEMSERVE_LLM_BACKOFF_S": "0.1",
    "MEMSERVE_LLM_BREAKER_RESET_S": "1",
    "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "1",
    # Robustness (test_extraction_robustness.py): a refused batch is retried after 0.3 s,
    # 0.6 s, then dead-lettered (default max_attempts 3), within seconds instead of minutes.
    "MEMSERVE_EXTRACT_RETRY_BACKOFF_S": "0.3",
    # Lifecycle (test_lifecycle.py): purge expired memories and write access counts quickly.
    "MEMSERVE_LIFECYCLE_PURGE_INTERVAL_S": "1",
    "MEMSERVE_LIFECYCLE_ACCESS_FLUSH_S": "0.5",
    # test_forget_faults.py: a dead replica's erasure stops blocking after 3 s.
    "MEMSERVE_LIFECYCLE_ERASURE_LEASE_S": "3",
    # test_webhooks.py: deliveries to a receiver on this machine, rounds every 0.2 s.
    "MEMSERVE_WEBHOOKS_ALLOWED_NETWORKS": '["127.0.0.1/32"]',
    "MEMSERVE_WEBHOOKS_INTERVAL_S": "0.2",
    # test_identity.py and tests/security: the local token issuer listens on 127.0.0.1.
    "MEMSERVE_IDENTITY_ALLOW_PRIVATE_JWKS": "true",
    "MEMSERVE_IDENTITY_FETCH_TIMEOUT_S": "1",
    "MEMSERVE_IDENTITY_REFRESH_MIN_INTERVAL_S": "1",
    # mem0 document URLs (test_mem0_client.py, tests/security/test_document_attacks.py):
    # the tests' document server listens on 127.0.0.2; 127.0.0.1 and the rest stay refused.
    "MEMSERVE_FETCH_ALLOWED_NETWORKS": '["127.0.0.2/32"]',
    "MEMSERVE_FETCH_TIMEOUT_S": "3",
    # tests/security: a PDF bomb's parse is killed at 3 s of CPU, well within BOMB_S.
    "MEMSERVE_DOC_PARSE_CPU_S": "3",
    # test_context.py: a request's rerank may use the (scripted) LLM; off unless asked.
    "MEMSERVE_RERANK_BACKENDS": '["llm"]',
}


@pytest.fixture(scope="session")
def service(tmp_path_factory, fake_llm):
    svc = ServiceProcess(
        tmp_path_factory.mktemp("memserve"),
        "msk_boot_" + secrets.token_hex(8),
        extra_env={"MEMSERVE_LLM_BASE_URL": fake_llm.url, **E2E_LLM_ENV},
    )
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def keys(service) -> Keys:
    def k(tenant: str, role: str, user: str | None = None) -> str:
        return service.add_key("msk_" + secrets.token_hex(16), tenant, role, user)

    return Keys(
        service=service.bootstrap_key,
        service_t2=k("t2", "service"),
        alice=k("default", "user", "alice"),
        bob=k("default", "user", "bob"),
        alice_t2=k("t2", "user", "alice"),
    )


def client_for(service: ServiceProcess, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=service.base_url, headers=headers, timeout=30)


@pytest.fixture(scope="session")
def api(service, keys) -> httpx.Client:
    """Client with the default tenant's service key."""
    with client_for(service, keys.service) as c:
        yield c


@pytest.fixture
def uid() -> str:
    """A fresh user id so tests do not see each other's memories."""
    return "u_" + secrets.token_hex(6)
