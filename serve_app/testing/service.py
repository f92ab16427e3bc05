"""The real service (`python -m serve_app run`) in a subprocess, for e2e tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import httpx

from serve_app.ports import free_port
from serve_app.store.keys import seed_key

REPO = Path(__file__).resolve().parents[2]


class ServiceProcess:
    """Start, stop and restart the service exactly as `make run` does."""

    # Services running in this pytest process: tests/security reuses the e2e one.
    running: ClassVar[list[ServiceProcess]] = []
    # One models cache (MEMSERVE_MODELS_CACHE) for every service of a test run: each
    # fresh data directory would otherwise build and verify the int8 copy again (seconds
    # of CPU per start); the copy is built once under a lock (models/requantize.py).
    models_cache: ClassVar[Path | None] = None

    def __init__(self, data_dir: Path, bootstrap_key: str, extra_env: dict | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.bootstrap_key = bootstrap_key
        self.admin_key = "msk_admin_" + bootstrap_key[-16:]  # admin key of tenant "default"
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "service.log"
        self.startup_s: float | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres:@/postgres?host={self.data_dir / 'pg'}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSERVE_")}
        env.update(
            MEMSERVE_DATA_DIR=str(self.data_dir),
            MEMSERVE_PORT=str(self.port),
            MEMSERVE_BOOTSTRAP_KEY=self.bootstrap_key,
            MEMSERVE_RAY_DASHBOARD="false",
            MEMSERVE_RAY_NUM_CPUS="4",
            MEMSERVE_ADMIN_KEY=self.admin_key,
            # High enough for the fuzzing suites; 429s are tested on a low-limit key.
            MEMSERVE_RATE_LIMIT_PER_S="10000",
            MEMSERVE_RATE_LIMIT_BURST="20000",
            PYTHONUNBUFFERED="1",
        )
        if self.models_cache is not None:
            env["MEMSERVE_MODELS_CACHE"] = str(self.models_cache)
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 240.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the process
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "serve_app", "run"],
            cwd=REPO,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited early; see {self.log_path}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    self.startup_s = time.monotonic() - started
                    ServiceProcess.running.append(self)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"service not ready in {timeout}s:\n{self.tail()}")

    def stop(self, timeout: float = 90.0) -> None:
        if self in ServiceProcess.running:
            ServiceProcess.running.remove(self)
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def add_key(self, key: str, tenant: str, role: str, user_id: str | None = None) -> str:
        seed_key(self.dsn, tenant, role, key, f"test-{role}", user_id=user_id)
        return key

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-n:])
        except OSError:
            return ""
