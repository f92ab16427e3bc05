"""Soak: a long Locust run (default 30 min; not in CI) that also watches replica memory.

Starts a fresh service, runs the chat-platform mix, and every ``--sample-s`` seconds
records the RSS of each Serve replica process (psutil; Ray titles them
``ray::ServeReplica:memserve:<Deployment>``) under the service's process tree.
Writes loadtests/results/soak-*.json: errors, RPS, p50/p95 per route, and memory per
replica over time (plus growth from the first to the last sample).

    .venv/bin/python loadtests/soak.py --minutes 30 --users 20     # make soak
    .venv/bin/python loadtests/soak.py --minutes 2                  # a trial
"""

from __future__ import annotations

import argparse
import sys
import time

import psutil
from harness import RESULTS, fresh_service, print_table, read_failures, read_stats, run_locust
from harness import write_json as save

TITLE = "ServeReplica:memserve:"


def replica_rss(root_pid: int) -> dict[str, float]:
    """{"<Deployment>#<pid>": RSS MiB} for every Serve replica under ``root_pid``."""
    out: dict[str, float] = {}
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
            if TITLE in cmd:
                # Ray appends the running method to the title (Ingress.handle_request...).
                name = cmd.split(TITLE, 1)[1].split()[0].split(".")[0]
                out[f"{name}#{proc.pid}"] = round(proc.memory_info().rss / 2**20, 1)
        except (psutil.NoSuchProcess, psutil.AccessDenied, IndexError):
            continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--spawn-rate", type=float, default=5)
    ap.add_argument("--sample-s", type=float, default=15)
    args = ap.parse_args()
    seconds = int(args.minutes * 60)
    RESULTS.mkdir(parents=True, exist_ok=True)
    prefix = RESULTS / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    samples: list[dict] = []
    with fresh_service() as svc:
        assert svc.proc is not None
        started = time.monotonic()

        def sample() -> None:
            rss = replica_rss(svc.proc.pid)
            samples.append({"t_s": round(time.monotonic() - started, 1), "rss_mib": rss})
            print(f"[{samples[-1]['t_s']:7.0f}s] " + "  ".join(f"{k}={v}" for k, v in rss.items()))

        rc = run_locust(
            svc.base_url,
            svc.bootstrap_key,
            args.users,
            args.spawn_rate,
            seconds,
            prefix,
            while_running=sample,
            sample_every_s=args.sample_s,
        )
        sample()
    rows = read_stats(prefix)
    total = rows[-1]
    first, last = samples[0]["rss_mib"], samples[-1]["rss_mib"]
    growth = {k: round(last[k] - first[k], 1) for k in last if k in first}
    print(f"\nsoak: {args.minutes} min, {args.users} users (locust exit {rc})")
    print_table(rows)
    print("replica RSS growth (MiB, first -> last sample):", growth)
    path = save(
        "soak",
        {
            "minutes": args.minutes,
            "users": args.users,
            "routes": rows,
            "total_rps": total["rps"],
            "total_requests": total["requests"],
            "total_failures": total["failures"],
            "failures": read_failures(prefix),
            "memory_samples": samples,
            "rss_growth_mib": growth,
        },
    )
    print(f"total {total['rps']:.1f} req/s, {total['failures']} failures; wrote {path}")
    return 0 if total["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
