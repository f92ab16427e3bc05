"""Shared by smoke.py and soak.py: start a fresh service, run Locust headless, read its CSV.

The service is the real one (`python -m serve_app run` via serve_app/testing/service.py's
ServiceProcess) in a throw-away data directory, stopped at the end.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "loadtests" / "results"
LOCUSTFILE = ROOT / "loadtests" / "locustfile.py"
sys.path.insert(0, str(ROOT))

from serve_app.testing.service import ServiceProcess  # noqa: E402


@contextmanager
def fresh_service(data_dir: Path | None = None, **extra_env: str):
    """A freshly started service (own data dir, own Ray), stopped on exit."""
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="memserve-load-")
        data_dir = Path(tmp.name)
    svc = ServiceProcess(data_dir, "msk_load_" + secrets.token_hex(8), extra_env=extra_env)
    svc.start()
    print(f"service ready at {svc.base_url} in {svc.startup_s:.1f}s", flush=True)
    try:
        yield svc
    finally:
        svc.stop()
        if tmp is not None:
            tmp.cleanup()


@contextmanager
def scratch_database(encoder, prefix: str = "memserve-bench-"):
    """An embedded PostgreSQL in a throw-away directory, migrated, with ``encoder``'s vector
    table: yields (dsn, data directory); stopped and removed afterwards."""
    from serve_app.db.embedded import EmbeddedPostgres
    from serve_app.db.migrations import migrate
    from serve_app.store.vectors import ensure_table

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        dsn = pg.start()
        try:
            migrate(dsn)
            ensure_table(dsn, encoder.spec.table_slug, encoder.spec.dim)
            yield dsn, tmp
        finally:
            pg.stop()


def run_locust(
    host: str,
    api_key: str,
    users: int,
    spawn_rate: float,
    seconds: int,
    csv_prefix: Path,
    while_running: Callable[[], None] | None = None,
    sample_every_s: float = 10.0,
) -> int:
    """Run Locust headless; ``while_running`` is called every ``sample_every_s`` seconds."""
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        str(users),
        "-r",
        str(spawn_rate),
        "-t",
        f"{seconds}s",
        "--host",
        host,
        "--csv",
        str(csv_prefix),
        "--only-summary",
        "--stop-timeout",
        "10",
    ]
    env = dict(os.environ, MEMSERVE_API_KEY=api_key)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    while proc.poll() is None:
        if while_running is not None:
            while_running()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(sample_every_s)
    return proc.returncode


def read_stats(csv_prefix: Path) -> list[dict]:
    """Per-route rows of Locust's ``<prefix>_stats.csv`` (the Aggregated row last)."""
    rows = []
    with open(f"{csv_prefix}_stats.csv", newline="") as f:
        for row in csv.DictReader(f):
            rows.append(
                {
                    "method": row["Type"],
                    "route": row["Name"],
                    "requests": int(row["Request Count"]),
                    "failures": int(row["Failure Count"]),
                    "rps": float(row["Requests/s"]),
                    "p50_ms": float(row["50%"] or 0),
                    "p95_ms": float(row["95%"] or 0),
                    "p99_ms": float(row["99%"] or 0),
                    "avg_ms": float(row["Average Response Time"] or 0),
                }
            )
    return rows


def read_failures(csv_prefix: Path) -> list[dict]:
    path = Path(f"{csv_prefix}_failures.csv")
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def print_table(rows: list[dict]) -> None:
    head = f"{'method':7} {'route':32} {'reqs':>7} {'fail':>5} {'rps':>7} {'p50':>6} {'p95':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['method']:7} {r['route'][:32]:32} {r['requests']:7d} {r['failures']:5d} "
            f"{r['rps']:7.1f} {r['p50_ms']:6.0f} {r['p95_ms']:6.0f}"
        )


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))  # paths, datetimes
    return path
