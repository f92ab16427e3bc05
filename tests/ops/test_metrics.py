"""Custom metrics: the ASGI middleware's labels, and Ray's Prometheus endpoint exporting them."""

from __future__ import annotations

import re
import time
import uuid

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from serve_app.metrics import UNMATCHED, PoolMetrics, RequestMetrics, route_template, status_class
from tests.ops.conftest import client


def test_route_template_and_status_class():
    app = FastAPI()
    seen: list[tuple[str, int]] = []

    class Spy(RequestMetrics):
        def record(self, scope, status, elapsed_ms):
            seen.append((route_template(scope), status))
            super().record(scope, status, elapsed_ms)

    @app.get("/items/{item_id}")
    async def item(item_id: str):
        return {"id": item_id}

    app.add_middleware(Spy)
    with TestClient(app) as c:
        assert c.get("/items/42").status_code == 200
        assert c.get("/nope/1").status_code == 404
    assert seen == [("/items/{item_id}", 200), (UNMATCHED, 404)]
    assert [status_class(s) for s in (201, 404, 503)] == ["2xx", "4xx", "5xx"]


async def test_pool_metrics_sample_real_pool(fresh_db):
    from serve_app.db.pool import open_pool
    from serve_app.settings import Settings

    pool = await open_pool(
        fresh_db, Settings().with_(db={"pool_min": 2, "pool_max": 5}), min_size=2
    )
    try:
        await pool.wait(10)
        values = PoolMetrics(pool, "test").sample()
        assert values["pool_max"] == 5 and values["pool_size"] >= 2
        assert values["pool_available"] == values["pool_size"]
    finally:
        await pool.close()


def _metric_lines(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


@pytest.mark.e2e
def test_custom_metrics_on_ray_prometheus_endpoint(ops_service):
    svc = ops_service
    with client(svc) as c:
        for i in range(3):
            r = c.post("/v1/memories", json={"user_id": "metrics_u", "content": f"tea #{i}"})
            assert r.status_code == 201
        assert c.post("/v1/search", json={"user_id": "metrics_u", "query": "tea"}).status_code
        assert c.get(f"/v1/memories/{uuid.uuid4()}", params={"user_id": "x"}).status_code == 404
    wanted = {
        "latency /v1/memories": r'ray_memserve_http_request_ms_count\{[^}]*route="/v1/memories"'
        r'[^}]*status="2xx"',
        "counter 4xx": r'ray_memserve_http_requests_total\{[^}]*route="/v1/memories/\{memory_id\}"'
        r'[^}]*status="4xx"',
        "pool ingress": r'ray_memserve_db_pool_size\{[^}]*component="ingress"',
        "pool retriever": r'ray_memserve_db_pool_size\{[^}]*component="retriever"',
        "embed batch": r"ray_memserve_embed_batch_size_count\{",
    }
    deadline = time.monotonic() + 60
    missing = list(wanted)
    while missing and time.monotonic() < deadline:
        text = _metric_lines(svc.metrics_port)  # type: ignore[attr-defined]
        missing = [k for k, rx in wanted.items() if not re.search(rx, text)]
        if missing:
            time.sleep(1)
    assert not missing, f"not exported after 60s: {missing}"
    count = re.search(
        r'ray_memserve_http_requests_total\{[^}]*method="POST"[^}]*route="/v1/memories"'
        r'[^}]*status="2xx"[^}]*\} (\d+(?:\.\d+)?)',
        text,
    )
    assert count and float(count.group(1)) >= 3
