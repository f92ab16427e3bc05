"""The proxy choice: HAProxy where its binary runs, Serve's Python proxy otherwise."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

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
    assert out.stdout.split() == [f"{FLAG}=0"]
