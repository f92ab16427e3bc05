"""The security suite attacks the real service over HTTP.

It reuses the e2e service when that one already runs in this pytest session
(a full run), else starts its own the same way (with the fake LLM upstream).
Attack cases are counted per kind (tests/security/report.py) and reported, with the
leaks and 5xx answers found, in the terminal summary and in
``loadtests/results/security_suite.json`` (the hooks are in tests/conftest.py, which
the xdist controller loads too).
"""

from __future__ import annotations

import secrets

import httpx
import pytest

from serve_app.testing.llm_server import FakeLLM
from serve_app.testing.service import ServiceProcess
from tests.e2e.conftest import E2E_LLM_ENV


@pytest.fixture(scope="session")
def sec_service(tmp_path_factory):
    if ServiceProcess.running:
        yield ServiceProcess.running[0]
        return
    llm = FakeLLM().start()
    svc = ServiceProcess(
        tmp_path_factory.mktemp("memserve_sec"),
        "msk_boot_" + secrets.token_hex(8),
        extra_env={"MEMSERVE_LLM_BASE_URL": llm.url, **E2E_LLM_ENV},
    )
    svc.start()
    yield svc
    svc.stop()
    llm.stop()


def http(service: ServiceProcess, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=service.base_url, headers=headers, timeout=60)
