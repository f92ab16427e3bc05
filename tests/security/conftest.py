"""The security suite attacks the real service over HTTP.

It reuses the e2e service when that one already runs in this pytest session
(a full run), else starts its own the same way (with the fake LLM upstream).
Attack cases are counted per kind and reported in the terminal summary and in
``.pytest_cache/security_cases.json``.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import E2E_LLM_ENV
from tests.e2e.service import ServiceProcess
from tests.fakes.llm_server import FakeLLM

CASES: Counter[str] = Counter()
FINDINGS: list[str] = []


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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not CASES:
        return
    total = sum(CASES.values())
    terminalreporter.section("memserve security suite")
    for kind, n in sorted(CASES.items()):
        terminalreporter.write_line(f"{kind:<40} {n:>6}")
    terminalreporter.write_line(f"{'total attack/fuzz cases':<40} {total:>6}")
    terminalreporter.write_line(f"leaks / 5xx found: {len(FINDINGS)}")
    out = Path(config.rootpath) / ".pytest_cache" / "security_cases.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"cases": dict(CASES), "total": total, "findings": FINDINGS}))
