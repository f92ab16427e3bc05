"""docs/grafana/memserve.json queries only metrics that serve_app/metrics defines.

The names come from the code (every ``MetricSpec`` in the module), with the suffixes
Ray's Prometheus export gives each kind, so renaming or dropping a metric fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from serve_app import metrics
from serve_app.telemetry import MetricSpec

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "memserve.json"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
# Labels Prometheus/Ray add to every series, besides each metric's own tags.
COMMON_LABELS = {"le", "instance", "job", "application", "deployment", "replica", "SessionName"}


def specs() -> dict[str, MetricSpec]:
    """Every metric defined in serve_app.metrics (module constants and dicts of them)."""
    found: dict[str, MetricSpec] = {}
    for value in vars(metrics).values():
        values = value.values() if isinstance(value, dict) else [value]
        for v in values:
            if isinstance(v, MetricSpec):
                found[v.name] = v
    return found


def exported() -> dict[str, MetricSpec]:
    """Prometheus series name (as Ray exports it) -> the metric it belongs to."""
    return {f"ray_{s.name}{suffix}": s for s in specs().values() for suffix in SUFFIXES[s.kind]}


def expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [
        t["expr"]
        for panel in dashboard["panels"]
        for t in panel.get("targets", [])
        if t.get("expr")
    ]
    assert exprs, "the dashboard has no queries"
    return exprs


def test_the_code_defines_the_metrics_the_dashboard_is_about():
    assert {"memserve_http_request_ms", "memserve_embed_batch_size"} <= set(specs())
    assert all(n.startswith("memserve_") for n in specs())


@pytest.mark.parametrize("expr", expressions())
def test_every_series_in_the_dashboard_exists_in_code(expr):
    names = set(re.findall(r"\b(ray_memserve_[a-z0-9_]+)", expr))
    assert names, f"query names no memserve metric: {expr}"
    known = exported()
    for name in names:
        assert name in known, f"{name} is not defined in serve_app/metrics ({expr})"
        labels = set(re.findall(r"by \(([^)]*)\)", expr))
        used = {lab.strip() for group in labels for lab in group.split(",") if lab.strip()}
        allowed = set(known[name].tag_keys) | COMMON_LABELS
        assert used <= allowed, f"{name} has no label {used - allowed} ({expr})"


def test_the_dashboard_covers_each_area():
    used = {
        known.name
        for expr in expressions()
        for name, known in exported().items()
        if re.search(rf"\b{name}\b", expr)
    }
    wanted = [
        metrics.HTTP_REQUEST_MS,  # request latency per route
        metrics.EMBED_BATCH_SIZE,
        metrics.EMBED_QUEUE_WAIT_MS,
        metrics.RETRIEVER_HIT_RATE,
        metrics.EXTRACT_MEMORIES,  # extraction outcomes
        metrics.EXTRACT_ERRORS,
        *metrics.DB_POOL.values(),  # pool usage
        metrics.LLM_TOKENS,  # LLM spend per tenant and purpose
        metrics.LLM_BUDGET_EVENTS,
    ]
    missing = [s.name for s in wanted if s.name not in used]
    assert not missing, f"dashboard panels missing for {missing}"
