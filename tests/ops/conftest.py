"""Fixtures for operations tests: dedicated services (never the shared e2e one) and load."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from serve_app.ports import free_port
from serve_app.testing.service import ServiceProcess


def start_service(data_dir: Path, **extra_env: str) -> ServiceProcess:
    """A fresh service with its Ray metrics on a known port (``svc.metrics_port``)."""
    port = free_port()
    env = {"MEMSERVE_RAY_METRICS_PORT": str(port), "MEMSERVE_POOL_METRICS_INTERVAL_S": "1"}
    env.update(extra_env)
    svc = ServiceProcess(data_dir, "msk_ops_" + secrets.token_hex(8), extra_env=env)
    svc.metrics_port = port  # type: ignore[attr-defined]
    svc.start()
    return svc


@pytest.fixture(scope="package", autouse=True)
def _quiet_machine() -> None:
    """Stop the shared e2e service first where it runs in this process (one process:
    ops tests run last): there the services run one at a time."""
    for svc in list(ServiceProcess.running):
        svc.stop()


@pytest.fixture(scope="package")
def ops_service(tmp_path_factory) -> Iterator[ServiceProcess]:
    """One service shared by the ops tests that leave it healthy (faults are healed)."""
    svc = start_service(tmp_path_factory.mktemp("ops"))
    yield svc
    svc.stop()


@pytest.fixture
def ops_service_ended(ops_service: ServiceProcess) -> ServiceProcess:
    """The shared ops service for the one test that stops it: tests/scheduling.py runs
    that test after every other user of ``ops_service`` and before the tests that start
    services of their own (one service start fewer, and none left idle beside theirs)."""
    return ops_service


def client(svc: ServiceProcess, timeout: float = 30.0) -> httpx.Client:
    return httpx.Client(
        base_url=svc.base_url,
        headers={"Authorization": f"Bearer {svc.bootstrap_key}"},
        timeout=timeout,
    )


def replica_pids(svc: ServiceProcess, deployment: str) -> list[int]:
    """Pids of this service's replicas of ``deployment`` (Ray titles them
    ``ray::ServeReplica:memserve:<Deployment>``); found under the launcher's process
    tree so other Ray instances on the machine are never touched."""
    assert svc.proc is not None
    title = f"ServeReplica:memserve:{deployment}"
    pids = []
    for proc in psutil.Process(svc.proc.pid).children(recursive=True):
        try:
            if any(title in part for part in proc.cmdline()):
                pids.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return pids


@dataclass
class Load:
    """Writers (and readers) hammering one service from threads, recording outcomes.

    Every 201 id is kept in ``acked`` so a test can check no acknowledged write was lost.
    """

    svc: ServiceProcess
    user: str = field(default_factory=lambda: "ops_" + secrets.token_hex(5))
    writers: int = 4
    timeout: float = 30.0
    acked: list[str] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # transport errors by type
    slowest_failure_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _worker(self, n: int) -> None:
        with client(self.svc, self.timeout) as c:
            i = 0
            while not self._stop.is_set():
                i += 1
                started = time.monotonic()
                try:
                    if i % 3 == 0:
                        r = c.post("/v1/search", json={"user_id": self.user, "query": f"fact {i}"})
                    else:
                        body = {"user_id": self.user, "content": f"writer {n} fact number {i}"}
                        r = c.post("/v1/memories", json=body)
                    elapsed = time.monotonic() - started
                    with self._lock:
                        self.statuses[r.status_code] += 1
                        if r.status_code == 201:
                            self.acked.append(r.json()["id"])
                        elif r.status_code >= 500:
                            self.slowest_failure_s = max(self.slowest_failure_s, elapsed)
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.errors[type(exc).__name__] += 1
                        self.slowest_failure_s = max(
                            self.slowest_failure_s, time.monotonic() - started
                        )
                    time.sleep(0.05)

    def __enter__(self) -> Load:
        for n in range(self.writers):
            t = threading.Thread(target=self._worker, args=(n,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)

    def ok(self) -> int:
        return sum(v for k, v in self.statuses.items() if 200 <= k < 300)

    def failures(self) -> int:
        return sum(v for k, v in self.statuses.items() if k >= 500) + sum(self.errors.values())

    def wait_for(self, n_ok: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.ok() < n_ok:
            assert time.monotonic() < deadline, f"load made no progress: {self.statuses}"
            time.sleep(0.1)


def stored_ids(svc: ServiceProcess, user: str) -> set[str]:
    """Every memory id of ``user``, paging through GET /v1/memories."""
    ids: set[str] = set()
    cursor = None
    with client(svc) as c:
        while True:
            params = {"user_id": user, "limit": 200}
            if cursor:
                params["cursor"] = cursor
            r = c.get("/v1/memories", params=params)
            assert r.status_code == 200, r.text
            body = r.json()
            ids.update(m["id"] for m in body["memories"])
            cursor = body.get("next_cursor")
            if not cursor:
                return ids


def missing_acked(svc: ServiceProcess, user: str, acked: list[str]) -> list[str]:
    """Acknowledged ids that are not stored."""
    stored = stored_ids(svc, user)
    return [mid for mid in acked if mid not in stored]


def wait_ready(svc: ServiceProcess, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{svc.base_url}/readyz", timeout=3).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"service not ready again in {timeout}s:\n{svc.tail()}")


def listeners(port: int) -> list[psutil.Process]:
    """The live processes listening on ``port``, newest first.

    Serve reloads HAProxy as deployments come and go (``haproxy -sf <old>``): for a
    moment the old and the new process both listen, then the old one exits, possibly
    between reading the socket table and looking its pid up; such a one is skipped.
    """
    found: dict[int, psutil.Process] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                proc.create_time()
            except psutil.NoSuchProcess:
                continue
            found[proc.pid] = proc
    return sorted(found.values(), key=lambda p: p.create_time(), reverse=True)


def listener(port: int, timeout: float = 10.0) -> psutil.Process:
    """The process serving 127.0.0.1:``port`` (HAProxy or Serve's Python proxy): the
    newest live listener, waiting out a reload hand-over."""
    deadline = time.monotonic() + timeout
    while not (live := listeners(port)):
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on port {port}")
        time.sleep(0.2)
    return live[0]
