"""The proxy choice: HAProxy where its binary runs, Serve's Python proxy otherwise."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from serve_app import ingress_proxy
from serve_app.ingress_proxy import (
    BINARY_VAR,
    FLAG,
    HAProxyUnavailable,
    check_binary,
    find_binary,
    ray_env,
)
from serve_app.ports import free_port
from serve_app.settings import Settings
from serve_app.terminal_output import banner


def _script(tmp_path, body: str, mode: int = 0o755) -> str:
    path = tmp_path / "haproxy"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return str(path)


def test_the_bundled_binary_runs():
    binary = find_binary({})
    assert os.access(binary, os.X_OK)
    assert check_binary(binary).startswith("HAProxy version 2.8")


def test_explicit_binary_wins_and_must_be_executable(tmp_path):
    ok = _script(tmp_path, "echo 'HAProxy version 9.9'")
    assert find_binary({BINARY_VAR: ok}) == ok
    os.chmod(ok, 0o644)
    with pytest.raises(HAProxyUnavailable, match="not an executable"):
        find_binary({BINARY_VAR: ok})


@pytest.mark.parametrize(
    "body", ["echo 'HAProxy version 2.8'; exit 1", "echo 'something else'", "exit 0"]
)
def test_a_binary_that_does_not_answer_like_haproxy_is_refused(tmp_path, body):
    with pytest.raises(HAProxyUnavailable):
        check_binary(_script(tmp_path, body))


def test_on_sets_the_flag_ports_and_threads():
    env = ray_env(True, {})
    assert env[FLAG] == "1"
    assert set(ingress_proxy.FIXED_PORTS) <= set(env)
    assert 1 <= int(env[ingress_proxy.NBTHREAD_VAR]) <= 4
    assert env[ingress_proxy.CLOSE_SPREAD_VAR] == str(ingress_proxy.CLOSE_SPREAD_S)
    mine = ray_env(True, {ingress_proxy.CLOSE_SPREAD_VAR: "7"})
    assert ingress_proxy.CLOSE_SPREAD_VAR not in mine  # an operator's own value is kept


def test_drain_periods_are_ours_unless_the_operator_set_them():
    assert ingress_proxy.drain_env(0.5, {}) == dict.fromkeys(ingress_proxy.DRAIN_VARS, "0.5")
    own = {ingress_proxy.DRAIN_VARS[0]: "10"}
    assert ingress_proxy.drain_env(0.5, own) == {ingress_proxy.DRAIN_VARS[1]: "0.5"}


def test_side_ports_follow_the_service_port_so_two_services_never_share_them():
    default = ingress_proxy.side_ports(8000, {})
    other = ingress_proxy.side_ports(8001, {})
    busy = {int(p) for p in default.values()}
    if busy == {8404, 9101, 8500}:  # Ray's defaults when nothing else holds them
        assert {int(p) for p in other.values()} == {8405, 9102, 8501}
    assert not busy & {int(p) for p in other.values()}
    assert all(1024 <= int(p) <= 65535 for p in ingress_proxy.side_ports(65500, {}).values())


def test_the_banner_names_the_side_ports(monkeypatch):
    monkeypatch.setenv(FLAG, "1")
    monkeypatch.setenv("RAY_SERVE_HAPROXY_STATS_PORT", "18404")
    monkeypatch.setenv("RAY_SERVE_HAPROXY_METRICS_PORT", "19101")
    text = banner(Settings(), "/data", 1.0, None, None)
    assert "stats :18404" in text and "metrics :19101" in text


def test_a_starting_proxy_gets_time_to_answer_its_ready_check():
    assert ingress_proxy.start_env({}) == {ingress_proxy.READY_CHECK_VAR: "30"}
    assert ingress_proxy.start_env({ingress_proxy.READY_CHECK_VAR: "9"}) == {}  # the operator's
    from ray.serve._private import constants

    assert constants.PROXY_READY_CHECK_TIMEOUT_S == 5.0  # Ray's default, read at import


def test_off_by_setting():
    assert ray_env(False, {}) == {FLAG: "0"}


def test_falls_back_with_one_line_when_the_binary_cannot_run(tmp_path, caplog):
    broken = _script(tmp_path, "echo 'HAProxy version 2.8'", mode=0o644)
    with caplog.at_level(logging.INFO, logger="memserve"):
        assert ray_env(True, {BINARY_VAR: broken}) == {FLAG: "0"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "Python proxy" in lines[0] and broken in lines[0]


def test_a_taken_fixed_port_is_replaced_and_explicit_ones_kept(monkeypatch):
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(ingress_proxy, "FIXED_PORTS", {"A_PORT": taken, "B_PORT": taken})
        env = ray_env(True, {"B_PORT": "1234"})
    assert env["A_PORT"] != str(taken) and int(env["A_PORT"]) > 0
    assert "B_PORT" not in env  # set by the operator: left alone


def test_command_line_prints_env_words():
    env = {**os.environ, "MEMSERVE_HAPROXY": "false"}
    out = subprocess.run(
        [sys.executable, "-m", "serve_app.ingress_proxy"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    drain = [f"{var}=0.5" for var in ingress_proxy.DRAIN_VARS if var not in os.environ]
    start = [f"{k}={v}" for k, v in ingress_proxy.start_env().items()]
    assert out.stdout.split() == [f"{FLAG}=0", *drain, *start]


def _haproxy_on(tmp_path, port: int) -> subprocess.Popen:
    """The bundled haproxy answering on ``port``, started detached (as a reload's child
    is left once its actor is gone)."""
    cfg = tmp_path / f"haproxy-{port}.cfg"
    cfg.write_text(
        "defaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n"
        f"  timeout server 1s\nfrontend f\n  bind 127.0.0.1:{port}\n"
        "  http-request return status 200\n"
    )
    proc = subprocess.Popen(
        [find_binary({}), "-db", "-f", str(cfg)], start_new_session=True, stderr=subprocess.PIPE
    )
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    raise AssertionError("haproxy did not listen")


def test_reap_orphans_stops_haproxy_left_on_the_service_port_only(tmp_path):
    ours, other = free_port(), free_port()
    left = _haproxy_on(tmp_path, ours)
    bystander = _haproxy_on(tmp_path, other)
    try:
        assert ingress_proxy.reap_orphans(ours) == [left.pid]
        assert left.wait(5) is not None
        assert bystander.poll() is None  # another port: not ours to stop
        assert ingress_proxy.reap_orphans(ours) == []
    finally:
        for p in (left, bystander):
            if p.poll() is None:
                p.kill()
                p.wait(5)


def test_reap_command_line_stops_what_is_left(tmp_path):
    port = free_port()
    left = _haproxy_on(tmp_path, port)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "serve_app.ingress_proxy", "--reap", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert f"left on port {port}" in done.stderr and str(left.pid) in done.stderr
        assert left.wait(5) is not None
    finally:
        if left.poll() is None:
            left.kill()
            left.wait(5)
