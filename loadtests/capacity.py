"""Capacity model from a ``bench_vs_mem0`` result: cores and replicas per 1k requests/s.

Every figure comes from the measured CPU per request per process role (``/proc``, the
whole process tree, medians over repeats): CPU ms per request x 1,000 requests/s is
cores busy. A Python replica runs its request handling on one core, so a replica is
planned at ``--utilisation`` of one core (headroom for bursts and GC); the Embedder,
whose ONNX runs use the replica's CPUs, at that share of its ``num_cpus``.

``target_ongoing_requests`` follows from Little's law: a replica at its planned load
serves ``u / cpu_s`` requests/s, each in the replica for about the end-to-end latency at
one client (Ingress: the whole request; Retriever: its share of CPU plus its database
waits, taken as latency x its CPU share of the Ingress-side path), so
``ongoing = rate x time``. Serve adds a replica when the average rises above it.

    python -m loadtests.capacity loadtests/results/bench_vs_mem0-<ts>.json [--run memserve]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

SEARCH, INGEST, LATENCY = "search_c8", "batch100", "search_c1"
REPLICA_CPUS = {"Embedder": 2.0}  # num_cpus of serve_config.yaml where a replica uses more
TIERS = ("proxy", "Ingress", "Retriever", "Embedder", "postgres", "ray-infra")


def model(med: dict, utilisation: float) -> dict:
    """Per tier: cores and replicas per 1k searches/s and per 1k memories/s ingested,
    and the target_ongoing_requests of the Serve tiers."""
    search = med[SEARCH]["cpu_ms_per_req_by_role"]
    ingest = {k: v / 100 for k, v in med[INGEST]["cpu_ms_per_req_by_role"].items()}
    out: dict = {}
    for tier in TIERS:
        row = {
            "search_cores": round(search.get(tier, 0.0), 2),
            "ingest_cores": round(ingest.get(tier, 0.0), 2),
        }
        if tier in ("Ingress", "Retriever", "Embedder"):
            per_replica = utilisation * REPLICA_CPUS.get(tier, 1.0)
            row["search_replicas"] = math.ceil(row["search_cores"] / per_replica)
            row["ingest_replicas"] = math.ceil(row["ingest_cores"] / per_replica)
        out[tier] = row
    p50_s = med[LATENCY]["p50_ms"] / 1000
    ingress_path = search.get("Ingress", 0) + search.get("Retriever", 0)
    for tier in ("Ingress", "Retriever"):
        cpu_s = search.get(tier, 0) / 1000
        if cpu_s <= 0:
            continue
        rate = utilisation / cpu_s  # searches/s one replica serves at its planned load
        inside = p50_s if tier == "Ingress" else p50_s * search[tier] / ingress_path
        out[tier]["target_ongoing_requests"] = round(rate * inside, 1)
    out["total"] = {
        "search_cores": round(sum(search.values()), 2),
        "ingest_cores": round(sum(ingest.values()), 2),
    }
    return out


def markdown(cap: dict) -> str:
    lines = [
        "| tier | cores per 1k searches/s | replicas | cores per 1k memories/s"
        " (batches of 100) | replicas | target_ongoing_requests |",
        "|---|---|---|---|---|---|",
    ]
    for tier, r in cap.items():
        lines.append(
            f"| {tier} | {r['search_cores']} | {r.get('search_replicas', '')} |"
            f" {r['ingest_cores']} | {r.get('ingest_replicas', '')} |"
            f" {r.get('target_ongoing_requests', '')} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result", type=Path)
    ap.add_argument("--run", help="which memserve run of the result (default: the first)")
    ap.add_argument("--utilisation", type=float, default=0.7)
    args = ap.parse_args()
    medians = json.loads(args.result.read_text())["medians"]
    run = args.run or next(n for n in medians if n.startswith("memserve"))
    cap = model(medians[run], args.utilisation)
    print(f"{run}, {args.result.name}, replicas at {args.utilisation:.0%} of their CPUs\n")
    print(markdown(cap))


if __name__ == "__main__":
    main()
