"""What the security suite found, counted per kind, and its report.

The attack tests add to these counters in whichever process runs them. Under
pytest-xdist that is a worker: each worker hands its counts to the controller at the
end of its session (``workeroutput``), the controller adds them up and prints the
report and writes ``loadtests/results/security_suite.json`` (cases per kind, total,
leaks, server errors, other findings) and ``cost_amplification.json``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

CASES: Counter[str] = Counter()
FINDINGS: list[str] = []  # anything else a suite found wrong (schemathesis' other checks)
LEAKS: list[str] = []  # one caller saw another's data
SERVER_ERRORS: list[str] = []  # a 5xx answer to a request
COSTS: dict[str, dict] = {}  # route -> worst cost ratio and more (test_cost_amplification.py)
RESULTS = Path(__file__).resolve().parents[2] / "loadtests" / "results" / "security_suite.json"
COST_RESULTS = RESULTS.with_name("cost_amplification.json")
_KEY = "memserve_security"  # in a worker's workeroutput


def hand_over(config: pytest.Config) -> None:
    """In an xdist worker: pass this process's counts to the controller."""
    output = getattr(config, "workeroutput", None)
    if output is not None and CASES:
        state = [dict(CASES), FINDINGS, LEAKS, SERVER_ERRORS, COSTS]
        output[_KEY] = json.dumps(state)


def take_over(workeroutput: dict[str, Any]) -> None:
    """In the controller: add a finished worker's counts to this process's."""
    if _KEY not in workeroutput:
        return
    cases, findings, leaks, errors, costs = json.loads(workeroutput[_KEY])
    CASES.update(cases)
    FINDINGS.extend(findings)
    LEAKS.extend(leaks)
    SERVER_ERRORS.extend(errors)
    COSTS.update(costs)


def summary(terminalreporter, exitstatus: int) -> None:
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
