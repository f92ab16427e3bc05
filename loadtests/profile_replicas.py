"""Where a search's CPU goes inside each replica: py-spy on the running service.

Starts memserve as ``bench_vs_mem0`` does (default settings, ``--set`` for others),
stores a few memories, then drives ``--searches`` searches at ``--clients`` while
``py-spy record`` (non-blocking, so the replica is never paused) samples the proxy
and every Serve replica. For each process it reports the CPU per search (from /proc)
and the functions holding most of its samples, by self time and by inclusive time.
``/proc`` gives the totals; py-spy only splits them, and costs some CPU itself.

    flock /tmp/memserve-ray.lock .venv/bin/python -m loadtests.profile_replicas

Writes ``loadtests/results/profile_replicas-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import httpx

from loadtests import procstat
from loadtests.bench_servers import ROOT, memserve_server
from loadtests.bench_vs_mem0 import drive, request_for
from loadtests.harness import write_json

PY_SPY = ROOT / ".venv" / "bin" / "py-spy"
ROLES = ("Ingress", "Retriever", "Embedder", "proxy")


def targets(server) -> dict[str, int]:
    """role -> pid of one process of each profiled role."""
    found: dict[str, int] = {}
    for pid, p in procstat.snapshot(server.pids, server.match).items():
        role = server.classify(p.cmdline)
        if role in ROLES and role not in found:
            found[role] = pid
    return found


def top(raw: Path, n: int) -> dict:
    """Self and inclusive sample shares of the ``n`` heaviest frames of a raw profile."""
    selfc: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1] for f in stack.split(";")]
        c = int(count)
        total += c
        selfc[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
    share = lambda ctr: {f: round(v / max(total, 1), 3) for f, v in ctr.most_common(n)}  # noqa: E731
    return {"samples": total, "self": share(selfc), "inclusive": share(incl)}


async def load(server, clients: int, searches: int, seed: int) -> dict:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=60, limits=limits
    ) as client:
        await drive(client, [request_for(server, "batch", "prof", rng) for _ in range(2)], 1)
        await drive(client, [request_for(server, "search", "prof", rng) for _ in range(32)], 4)
        reqs = [request_for(server, "search", "prof", rng) for _ in range(searches)]
        before = procstat.snapshot(server.pids, server.match)
        res = await drive(client, reqs, clients)
        after = procstat.snapshot(server.pids, server.match)
    ok = max(1, len(res["latencies"]))
    cpu = procstat.cpu_by_role(before, after, server.classify)
    return {
        "searches": ok,
        "cpu_ms_per_search": {k: round(v * 1000 / ok, 2) for k, v in cpu.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--searches", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--set", action="append", default=[], metavar="MEMSERVE_X=VALUE")
    ap.add_argument("--repo", type=Path, default=ROOT, help="memserve checkout to profile")
    args = ap.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    out: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    with (
        memserve_server(args.repo, settings=settings) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        pids = targets(server)
        out["pids"] = pids
        spies = {
            role: subprocess.Popen(
                [
                    str(PY_SPY),
                    "record",
                    "--pid",
                    str(pid),
                    "--rate",
                    str(args.rate),
                    "--format",
                    "raw",
                    "--nonblocking",
                ]
                + ["-o", f"{tmp}/{role}.txt"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for role, pid in pids.items()
        }
        out["load"] = asyncio.run(load(server, args.clients, args.searches, seed=5))
        for p in spies.values():  # py-spy writes its profile on SIGINT
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
        out["profiles"] = {
            role: top(Path(f"{tmp}/{role}.txt"), args.top)
            for role in spies
            if Path(f"{tmp}/{role}.txt").exists()
        }
    for role, prof in out["profiles"].items():
        cpu = out["load"]["cpu_ms_per_search"].get(role)
        print(f"\n{role}: {cpu} ms CPU/search, {prof['samples']} samples; top self:")
        for f, s in list(prof["self"].items())[:10]:
            print(f"  {s:6.1%}  {f}")
    print(f"\nCPU ms per search by role: {out['load']['cpu_ms_per_search']}")
    print(f"wrote {write_json('profile_replicas', payload=out)}")


if __name__ == "__main__":
    main()
