"""The security suite attacks the real service over HTTP.

It reuses the e2e service when that one already runs in this pytest session
(a full run), else starts its own the same way (with the fake LLM upstream).
Attack cases are counted per kind and reported, with the leaks and 5xx answers
found, in the terminal summary and in ``loadtests/results/security_suite.json``
(cases per kind, total, leaks, server errors, other findings).
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
FINDINGS: list[str] = []  # anything else a suite found wrong (schemathesis' other checks)
LEAKS: list[str] = []  # one caller saw another's data
SERVER_ERRORS: list[str] = []  # a 5xx answer to a request
RESULTS = Path(__file__).resolve().parents[2] / "loadtests" / "results" / "security_suite.json"


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
        terminalreporter.write_line(f"{kind:<60} {n:>6}")
    terminalreporter.write_line(f"{'total attack/fuzz cases':<60} {total:>6}")
    terminalreporter.write_line(
        f"leaks found: {len(LEAKS)}; 5xx found: {len(SERVER_ERRORS)};"
        f" other findings: {len(FINDINGS)}"
    )
    report = {
        "cases": dict(sorted(CASES.items())),
        "total": total,
        "leaks": LEAKS,
        "server_errors": SERVER_ERRORS,
        "findings": FINDINGS,
        "exitstatus": int(exitstatus),
    }
    RESULTS.write_text(json.dumps(report, indent=1) + "\n")
