"""`make smoke`: 60 s of the chat-platform Locust mix against a freshly started service.

Prints RPS and p50/p95 per route and writes loadtests/results/smoke-*.json;
exits non-zero if any request failed.

    .venv/bin/python loadtests/smoke.py [--users 20] [--spawn-rate 5] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from harness import RESULTS, fresh_service, print_table, read_failures, read_stats, run_locust
from harness import write_json as save


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--spawn-rate", type=float, default=5)
    ap.add_argument("--seconds", type=int, default=60)
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    prefix = RESULTS / f"smoke-{time.strftime('%Y%m%d-%H%M%S')}"
    with fresh_service() as svc:
        rc = run_locust(
            svc.base_url, svc.bootstrap_key, args.users, args.spawn_rate, args.seconds, prefix
        )
        startup_s = svc.startup_s
    rows = read_stats(prefix)
    failures = read_failures(prefix)
    print(f"\nsmoke: {args.users} users, {args.seconds}s (locust exit {rc})")
    print_table(rows)
    total = rows[-1]
    path = save(
        "smoke",
        {
            "users": args.users,
            "spawn_rate": args.spawn_rate,
            "seconds": args.seconds,
            "service_startup_s": startup_s,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "routes": rows,
            "failures": failures,
            "total_rps": total["rps"],
            "total_failures": total["failures"],
        },
    )
    print(f"\ntotal {total['rps']:.1f} req/s, {total['failures']} failures; wrote {path}")
    return 0 if total["failures"] == 0 and total["requests"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
