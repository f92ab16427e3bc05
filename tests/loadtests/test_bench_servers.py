"""bench_servers' launcher: a server is timed until ready, and gone after its block."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from loadtests.bench_servers import _launch
from serve_app.ports import free_port


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert 1024 <= port <= 65535


def test_launch_yields_a_ready_server_and_stops_it(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    url = f"http://127.0.0.1:{port}/"
    with _launch(cmd, tmp_path, {}, tmp_path / "log", url, 30, 5) as (proc, ready_s):
        assert proc.poll() is None
        assert 0 < ready_s < 30
    assert proc.poll() is not None


def test_launch_reports_an_early_exit_with_the_log(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "print('boom-marker'); raise SystemExit(3)"]
    launch = _launch(cmd, tmp_path, {}, tmp_path / "log", "http://127.0.0.1:9/", 30, 5)
    with pytest.raises(RuntimeError, match="boom-marker"), launch:
        pass
