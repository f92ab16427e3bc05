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

from serve_app.testing.llm_server import FakeLLM
from serve_app.testing.service import ServiceProcess
from tests.e2e.conftest import E2E_LLM_ENV

CASES: Counter[str] = Counter()
FINDINGS: list[str] = []  # anything else a suite found wrong (schemathesis' other checks)
LEAKS: list[str] = []  # one caller saw another's data
SERVER_ERRORS: list[str] = []  # a 5xx answer to a request
COSTS: dict[str, dict] = {}  # route -> worst cost ratio and more (test_cost_amplification.py)
RESULTS = Path(__file__).resolve().parents[2] / "loadtests" / "results" / "security_suite.json"
COST_RESULTS = RESULTS.with_name("cost_amplification.json")


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
    if COSTS:
        _cost_summary(terminalreporter)


def _cost_summary(terminalreporter) -> None:
    """The worst t(4n)/t(n) per route, printed and written for the closing note."""
    terminalreporter.section("cost amplification: worst t(4n)/t(n) per route")
    head = f"{'route':<48} {'cases':>5} {'ratio':>6} {'4n s':>7} {'healthz ms':>10} {'5xx':>4}"
    terminalreporter.write_line(head + "  worst input")
    for route, row in sorted(COSTS.items(), key=lambda kv: -kv[1]["worst_ratio"]):
        terminalreporter.write_line(
            f"{route:<48} {row['cases']:>5} {row['worst_ratio']:>6.2f} {row['worst_4n_s']:>7.3f}"
            f" {row['worst_healthz_ms']:>10.1f} {row['5xx']:>4}  {row['worst_kind']}"
        )
    totals = {
        "routes": len(COSTS),
        "cases": sum(r["cases"] for r in COSTS.values()),
        "5xx": sum(r["5xx"] for r in COSTS.values()),
        "worst_ratio": max(r["worst_ratio"] for r in COSTS.values()),
        "worst_healthz_ms": max(r["worst_healthz_ms"] for r in COSTS.values()),
    }
    terminalreporter.write_line(
        f"routes {totals['routes']}, cases {totals['cases']}, 5xx {totals['5xx']},"
        f" worst ratio {totals['worst_ratio']}, slowest /healthz {totals['worst_healthz_ms']} ms"
    )
    COST_RESULTS.write_text(json.dumps({"totals": totals, "routes": COSTS}, indent=1) + "\n")
