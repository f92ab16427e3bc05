"""memserve against mem0 OSS on the same machine, the same client and the same workload.

    flock /tmp/memserve-ray.lock .venv/bin/python -m loadtests.bench_vs_mem0 --repeat 3
    ... --quick                        # small counts, for development
    ... --workloads search_c1,search_c8  # only these (an A/B of a search lever)
    ... --memserve-only --repo /work/baseline   # another checkout (shares this .venv)
    ... --query-embed both --memserve-only     # A/B the query routes on one commit
    ... --set MEMSERVE_CACHE_BUDGET_MB=0       # any other lever, recorded in the JSON
    ... --variant lean:RAY_enable_metrics_collection=0   # + memserve:lean each repeat
    ... --memserve-only --variant nopipe:MEMSERVE_INGEST_PIPELINE_CHUNK=0   # batch100 A/B

mem0 2.2.1 runs as its own REST server does (FastAPI, sync routes, one ``Memory``;
loadtests/mem0_peer.py) in a virtualenv of its own (built once, cached), on pgvector
in a separate embedded PostgreSQL, embedding with the same all-MiniLM-L6-v2 model
through sentence-transformers, ``infer=False``, as ``pip install mem0ai`` ships it
(no spaCy: the ``[nlp]`` extra's lemmatised BM25 and entity boosts stay off).
memserve starts as ``make run`` does, default settings. The two run one after the
other, never together; the machine should be otherwise idle. Workloads (httpx async
client, keep-alive, one user):

- single adds at 8 clients (200);
- batch ingest, batches of 100 (1,000 memories: memserve POST /v1/memories/batch,
  mem0 POST /memories with 100 messages, which mem0 stores one memory each);
- searches at 1 client (300) and at 8 clients (600), top_k 10.

Each workload reports req/s (memories/s for ingest), p50/p95 latency, errors, and
the server's CPU ms per successful request summed over its whole process tree (Ray's
processes, the proxy, PostgreSQL backends), read from /proc before and after. Failed
requests (e.g. 429 from memserve's default rate limit) are counted, not timed. The CPU per
request per role for searches at 8 clients is the hot-path profile. ``--repeat N``
runs the pair N times (alternating which goes first) and reports medians. Prints a
table and writes loadtests/results/bench_vs_mem0-<timestamp>.json.

``--query-embed`` picks who embeds search queries (``MEMSERVE_QUERY_EMBED``, issue 23):
``retriever`` (the default, one Serve hop per search), ``embedder``, or ``both``, which
runs memserve twice per repeat, as ``memserve:retriever`` and ``memserve:embedder``, and
reports each (ratios against mem0, or against the first without mem0). The settings of
every memserve run are in the JSON (``memserve_settings``, and each run's ``_info``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtests import procstat
from loadtests.bench_servers import Server, mem0_server, memserve_server
from loadtests.harness import write_json
from loadtests.stats import percentile
from loadtests.synthetic import memory, question

HOT = "search_c8"  # the workload whose per-role CPU is the hot-path profile
QUERY_ROUTES = ("retriever", "embedder")  # serve_app.settings: RetrievalSettings.query_embed


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "add" | "batch" | "search"
    requests: int
    clients: int
    label: str


def workloads(quick: bool) -> list[Workload]:
    n = (20, 2, 30, 60) if quick else (200, 10, 300, 600)
    return [
        Workload("add_c8", "add", n[0], 8, "single adds, 8 clients"),
        Workload("batch100", "batch", n[1], 1, "batch ingest (100/request)"),
        Workload("search_c1", "search", n[2], 1, "search, 1 client"),
        Workload(HOT, "search", n[3], 8, "search, 8 clients"),
    ]


def prefill_for(plan: list[Workload], quick: bool) -> int:
    """Memories the left-out write workloads would have written, so that searches of a
    ``--workloads`` subset see the user the whole plan builds."""
    names = {w.name for w in plan}
    return sum(
        w.requests * (100 if w.kind == "batch" else 1)
        for w in workloads(quick)
        if w.kind != "search" and w.name not in names
    )


def request_for(server: Server, kind: str, user: str, rng: random.Random) -> tuple[str, dict]:
    """(path, JSON body) of one request of ``kind`` in the server's own API."""
    mem0 = server.name == "mem0"
    if kind == "search":
        body = {"user_id": user, "query": question(rng), "top_k": 10}
        return ("/search" if mem0 else "/v1/search"), body
    texts = [memory(rng) for _ in range(100 if kind == "batch" else 1)]
    if mem0:
        msgs = [{"role": "user", "content": t} for t in texts]
        return "/memories", {"user_id": user, "messages": msgs, "infer": False}
    if kind == "batch":
        return "/v1/memories/batch", {"user_id": user, "items": [{"content": t} for t in texts]}
    return "/v1/memories", {"user_id": user, "content": texts[0], "infer": False}


async def drive(client: httpx.AsyncClient, reqs: list[tuple[str, dict]], clients: int) -> dict:
    """Send ``reqs`` from ``clients`` concurrent workers; latencies of the 2xx answers."""
    queue = list(reversed(reqs))
    lat: list[float] = []
    errors: dict[str, int] = {}

    async def worker() -> None:
        while queue:
            path, body = queue.pop()
            t = time.perf_counter()
            try:
                r = await client.post(path, json=body)
                ok, why = r.is_success, str(r.status_code)
            except httpx.HTTPError as e:
                ok, why = False, type(e).__name__
            if ok:
                lat.append((time.perf_counter() - t) * 1000)
            else:
                errors[why] = errors.get(why, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return {"latencies": lat, "wall_s": time.perf_counter() - started, "errors": errors}


async def run_server(server: Server, plan: list[Workload], seed: int, prefill: int = 0) -> dict:
    """Warm up, write ``prefill`` memories (untimed), then every workload in order with
    CPU accounting around each."""
    rng = random.Random(seed)
    user = f"bench_{seed}"
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    out: dict = {}
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=120, limits=limits
    ) as client:
        warm = "warmup_" + user
        await drive(client, [request_for(server, "add", warm, rng) for _ in range(8)], 4)
        await drive(client, [request_for(server, "search", warm, rng) for _ in range(16)], 4)
        batches = [request_for(server, "batch", user, rng) for _ in range(prefill // 100)]
        await drive(client, batches, 1)
        for w in plan:
            reqs = [request_for(server, w.kind, user, rng) for _ in range(w.requests)]
            before = procstat.snapshot(server.pids, server.match)
            res = await drive(client, reqs, w.clients)
            after = procstat.snapshot(server.pids, server.match)
            out[w.name] = summarise(w, res, procstat.cpu_by_role(before, after, server.classify))
    return out


def summarise(w: Workload, res: dict, cpu_s: dict[str, float]) -> dict:
    lat, wall = res["latencies"], res["wall_s"]
    ok = max(1, len(lat))
    row = {
        "requests": w.requests,
        "ok": len(lat),
        "errors": res["errors"],
        "req_per_s": len(lat) / wall,
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "cpu_ms_per_req": sum(cpu_s.values()) * 1000 / ok,
        "cpu_ms_per_req_by_role": {k: v * 1000 / ok for k, v in sorted(cpu_s.items())},
    }
    if w.kind == "batch":
        row["memories_per_s"] = row["req_per_s"] * 100
    return row


def memserve_names(query_embed: str, variants: list[str] = ()) -> list[str]:
    """The memserve runs of one repeat: one, or one per query route (``both``), then
    one per ``--variant``."""
    if query_embed == "both":
        names = [f"memserve:{route}" for route in QUERY_ROUTES]
    else:
        names = ["memserve"]
    return names + [f"memserve:{v.split(':', 1)[0]}" for v in variants]


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=V[,VAR=V]`` -> (name, settings); VAR is a ``MEMSERVE_*`` or ``RAY_*``
    variable (Ray reads its own from the environment the node starts with)."""
    name, _, body = text.partition(":")
    pairs = dict(p.split("=", 1) for p in body.split(",") if p)
    if not name or name in QUERY_ROUTES or not pairs or not all(map(settable, pairs)):
        raise ValueError(f"--variant takes NAME:MEMSERVE_X=V[,RAY_Y=W], not {text!r}")
    return name, pairs


def settable(var: str) -> bool:
    return var.startswith(("MEMSERVE_", "RAY_"))


def memserve_settings(name: str, args: argparse.Namespace) -> dict[str, str]:
    """Variables of a memserve run: ``--set`` ones, its query route, its variant's."""
    settings = dict(item.split("=", 1) for item in args.set)
    tag = name.split(":", 1)[1] if ":" in name else None
    variants = dict(parse_variant(v) for v in getattr(args, "variant", []))
    route = tag if tag in QUERY_ROUTES else args.query_embed
    if route == "both":  # a variant of a run that A/Bs the routes: the default route
        route = QUERY_ROUTES[0]
    return settings | {"MEMSERVE_QUERY_EMBED": route} | variants.get(tag, {})


def one_pass(name: str, args: argparse.Namespace, plan: list[Workload], seed: int) -> dict:
    if name == "mem0":
        ctx = mem0_server()
    else:
        cmd = shlex.split(args.memserve_cmd) if args.memserve_cmd else None
        ctx = memserve_server(Path(args.repo), cmd, memserve_settings(name, args))
    t0 = time.monotonic()
    with ctx as server:
        print(f"{name} ready in {server.startup_s:.1f}s at {server.base_url}", flush=True)
        result = asyncio.run(run_server(server, plan, seed, prefill_for(plan, args.quick)))
        result["_startup_s"] = server.startup_s
        result["_info"] = server.info
    result["_elapsed_s"] = time.monotonic() - t0  # start, workloads and stop
    return result


# (metric key, label suffix, workloads it is shown for)
METRICS = [
    ("req_per_s", "req/s", None),
    ("memories_per_s", "memories/s", {"batch100"}),
    ("p50_ms", "p50 ms", None),
    ("p95_ms", "p95 ms", None),
    ("cpu_ms_per_req", "server CPU ms/req", None),
]


def median_runs(runs: list[dict]) -> dict:
    """Per workload and metric, the median over runs (role profile included)."""
    out: dict = {}
    for wname in (k for k in runs[0] if not k.startswith("_")):
        rows = [r[wname] for r in runs]
        med = {
            k: statistics.median(r[k] for r in rows)
            for k in rows[0]
            if isinstance(rows[0][k], (int, float))
        }
        roles = {role for r in rows for role in r["cpu_ms_per_req_by_role"]}
        med["cpu_ms_per_req_by_role"] = {
            role: statistics.median(r["cpu_ms_per_req_by_role"].get(role, 0.0) for r in rows)
            for role in sorted(roles)
        }
        med["errors"] = sum(sum(r["errors"].values()) for r in rows)
        out[wname] = med
    return out


def print_table(med: dict[str, dict], plan: list[Workload]) -> None:
    names = list(med)
    base = "mem0" if "mem0" in med else names[0]  # ratios against it
    others = [n for n in names if n != base]
    width = max(9, *(len(n) for n in names))
    head = f"{'workload':44} " + " ".join(f"{n:>{width}}" for n in names)
    print("\n" + head + "".join(f" {'ratio':>7}" for _ in others))
    for w in plan:
        for key, unit, only in METRICS:
            if only is not None and w.name not in only:
                continue
            vals = {n: med[n][w.name].get(key) for n in names}
            cells = " ".join(f"{vals[n]:{width}.1f}" for n in names)
            ratios = "".join(
                f" {vals[n] / vals[base]:6.2f}x" if vals[base] else f" {'-':>7}" for n in others
            )
            print(f"{w.label + ', ' + unit:44} {cells}{ratios}")
    if others:
        print(f"(ratios: {', '.join(others)} over {base})")
    errs = {n: {w: med[n][w]["errors"] for w in med[n] if med[n][w]["errors"]} for n in names}
    if any(errs.values()):
        print(f"failed requests (not timed): {errs}")
    if not all(HOT in med[n] for n in names):
        return
    print(f"\nserver CPU ms per request by process role, {HOT}:")
    for n in names:
        prof = med[n][HOT]["cpu_ms_per_req_by_role"]
        print(
            f"  {n:{width}} "
            + "  ".join(f"{r} {v:.1f}" for r, v in prof.items())
            + f"  | total {med[n][HOT]['cpu_ms_per_req']:.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=1, help="full pairs to run; medians reported")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--memserve-only", action="store_true")
    only.add_argument("--mem0-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small counts, for development")
    ap.add_argument(
        "--workloads",
        help="comma-separated names to run (add_c8,batch100,search_c1,search_c8; default all):"
        " a search-only A/B spends its time on searches, not on ingest",
    )
    ap.add_argument(
        "--repo",
        default=str(Path(__file__).resolve().parents[1]),
        help="memserve checkout to benchmark (run with cwd and PYTHONPATH there)",
    )
    ap.add_argument(
        "--memserve-cmd",
        help="command that starts memserve (default: "
        "this checkout's .venv/bin/python -m serve_app run)",
    )
    ap.add_argument(
        "--query-embed",
        choices=[*QUERY_ROUTES, "both"],
        default="retriever",
        help="who embeds search queries (MEMSERVE_QUERY_EMBED); both: A/B in one run",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MEMSERVE_X=VALUE",
        help="a setting for memserve (repeatable): any lever, recorded in the JSON",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:VAR=V[,VAR=V]",
        help="one more memserve run per repeat, memserve:NAME, with these MEMSERVE_*/RAY_*"
        " variables (repeatable): A/B a lever side by side on one commit",
    )
    args = ap.parse_args()
    if bad := [item for item in args.set if not settable(item) or "=" not in item]:
        ap.error(f"--set takes MEMSERVE_NAME=VALUE or RAY_NAME=VALUE, not {bad}")
    try:
        [parse_variant(v) for v in args.variant]
    except ValueError as e:
        ap.error(str(e))
    memserves = [] if args.mem0_only else memserve_names(args.query_embed, args.variant)
    names = ["mem0"] * (not args.memserve_only) + memserves
    plan = workloads(args.quick)
    if args.workloads:
        wanted = set(args.workloads.split(","))
        if unknown := wanted - {w.name for w in plan}:
            ap.error(f"--workloads: unknown {sorted(unknown)}")
        plan = [w for w in plan if w.name in wanted]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    failures: list[str] = []
    started = time.monotonic()
    for i in range(args.repeat):
        for name in names if i % 2 == 0 else list(reversed(names)):
            print(f"--- run {i + 1}/{args.repeat}: {name}", flush=True)
            try:
                runs[name].append(one_pass(name, args, plan, seed=1000 + i))
            except Exception as e:  # keep the other server's results; say why at the end
                failures.append(f"{name} run {i + 1}: {e}")
                print(f"{name} failed: {e}", flush=True)
    med = {n: median_runs(r) for n, r in runs.items() if r}
    names = list(med)
    if names:
        print_table(med, plan)
    path = write_json(
        "bench_vs_mem0",
        payload={
            "args": vars(args),
            "workloads": [w.__dict__ for w in plan],
            "medians": med,
            "hot_path_profile": {
                n: med[n][HOT]["cpu_ms_per_req_by_role"] for n in names if HOT in med[n]
            },
            "memserve_settings": {n: memserve_settings(n, args) for n in memserves},
            "runs": runs,
            "failures": failures,
            "elapsed_s": time.monotonic() - started,
        },
    )
    print(f"\n{time.monotonic() - started:.0f}s in all; wrote {path}")
    if failures:
        raise SystemExit("failed runs:\n  " + "\n  ".join(failures))


if __name__ == "__main__":
    main()
