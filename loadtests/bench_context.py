"""Context quality and cost (issue 29): what a block carries for a message, against
what the message needs, side by side for plain search, today's block and each lever.

    flock /tmp/memserve-ray.lock /work/main/.venv/bin/python -m loadtests.bench_context
    ... --variants baseline,all --sources typed        # a quick A/B
    ... --locomo-queries 0                             # skip LoCoMo

Data: loadtests/data/context_bench.json (5 users, 16 memories and 1-2 facts each, 66
messages annotated with the memories/facts they need; 12 are small talk that needs
nothing). Every memory also carries its profile class label, so the write-time
classifier's precision is measured on the same data. Messages at even positions are
the calibration half (the evidence thresholds were tuned there), odd ones held out.

Sources (each its own users in the same service): ``typed`` (API adds with the type a
platform knows), ``untyped`` (the same adds as ``semantic``), ``llm`` (each memory said
in a session turn and extracted by the scripted LLM of serve_app/testing/llm_server.py).

``--data implicit``: the foreign set of ../shared/data/implicit_needs (loadtests/
implicit_needs.py: split by user, u01-u15 calibrate, u16-u30 report), sources typed and
untyped, figures per kind; variant ``mem0`` runs mem0 OSS's plain search (top 3, top 5)
on the same memories and messages.

Variants (one fresh service each, ``MEMSERVE_CONTEXT_*`` settings: the presets of
``serve_app.settings.CONTEXT_PRESETS``): ``search`` (plain /v1/search top-k, on the
baseline service), ``baseline`` (today's block: every lever off), ``profile``,
``split``, ``gate`` (one lever each), ``all`` (the defaults),
``nogate`` (the gate off: its calibration data), ``timewords`` (the defaults with
the gate's time-free lever off), ``encoded`` (parts, time-free texts encoded alone).
Per variant and source: needed recall, unneeded share (profile material excluded),
retrieved-section unneeded share, profile/total tokens, p50/p95 latency, server CPU ms
per call (whole process tree, /proc). LoCoMo dev: evidence R@10 of /v1/search and of
the context block's memories (baseline vs all). Prints a table, writes
loadtests/results/bench_context-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests import implicit_needs, procstat  # noqa: E402
from loadtests.bench_servers import mem0_server, memserve_server  # noqa: E402
from loadtests.context_calibrate import (  # noqa: E402
    Candidate,
    Sample,
    as_json,
    calibrate,
    replay_locomo,
)
from loadtests.context_metrics import (  # noqa: E402
    Labels,
    classifier_scores,
    outcome,
    summarise,
)
from loadtests.harness import write_json  # noqa: E402
from loadtests.stats import percentile  # noqa: E402
from serve_app.settings import CONTEXT_PRESETS, preset_env  # noqa: E402
from serve_app.testing.llm_server import FakeLLM, extraction  # noqa: E402

DATA = ROOT / "loadtests" / "data" / "context_bench.json"
# ../shared from the main checkout, ../../shared from a worktree under /work/wt
LOCOMO = next(
    (
        p / "shared" / "data" / "locomo-dev.json"
        for p in (ROOT.parent, ROOT.parent.parent)
        if (p / "shared" / "data" / "locomo-dev.json").exists()
    ),
    ROOT.parent / "shared" / "data" / "locomo-dev.json",
)
SOURCES = ("typed", "untyped", "llm")
ENV = {
    "MEMSERVE_RATE_LIMIT_PER_S": "0",
    "MEMSERVE_LLM_MODEL": "scripted",
    "MEMSERVE_LLM_TIMEOUT_S": "10",
    "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "1",
}


def settings_for(variant: str, extra: dict[str, str]) -> dict[str, str]:
    """The service's environment for ``variant`` (a preset of serve_app.settings)."""
    return {**ENV, **preset_env(CONTEXT_PRESETS[variant]), **extra}


class ScriptedExtractor:
    """The scripted LLM's extraction: each dataset memory said in a turn comes back as
    itself (with its type and, as the prompt asks, its profile class)."""

    def __init__(self, data: dict) -> None:
        self.by_text = {m["content"]: m for u in data["users"] for m in u["memories"]}

    def __call__(self, kind: str, messages: list[dict[str, Any]]) -> str | None:
        if kind != "extract":
            return None
        prompt = str(messages[-1].get("content", ""))
        found = [m for text, m in self.by_text.items() if text in prompt]
        return extraction(
            [
                {
                    "type": m["type"],
                    "content": m["content"],
                    "importance": 0.7,
                    "confidence": 0.9,
                    "class": m["cls"] or "none",
                }
                for m in found
            ]
        )


def typed(m: dict) -> str:
    """The type a platform sends (none: the API's default)."""
    return m["type"] or "semantic"


async def load_user(client: httpx.AsyncClient, user: dict, source: str, uid: str) -> Labels:
    """Write one user's memories and facts the way ``source`` does; labels by id."""
    labels = Labels()
    if source == "llm":
        msgs = []
        for m in user["memories"]:
            msgs += [
                {"role": "user", "content": f"By the way: {m['content']}"},
                {"role": "assistant", "content": "Noted."},
            ]
        sid = f"{uid}-s1"
        body = {"user_id": uid, "messages": msgs}
        (await client.post(f"/v1/sessions/{sid}/turns", json=body)).raise_for_status()
        (await client.post(f"/v1/sessions/{sid}/end", json={"user_id": uid})).raise_for_status()
        await settled(client, uid, sid)
        by_text = {m["content"]: m["key"] for m in user["memories"]}
        r = await client.get("/v1/memories", params={"user_id": uid, "limit": 200})
        r.raise_for_status()
        for row in r.json()["memories"]:
            if row["content"] in by_text:
                labels.key_of[row["id"]] = by_text[row["content"]]
    else:
        items = [
            {
                "content": m["content"],
                "type": (m["type"] or "semantic") if source == "typed" else "semantic",
            }
            for m in user["memories"]
        ]
        r = await client.post("/v1/memories/batch", json={"user_id": uid, "items": items})
        r.raise_for_status()
        for m, row in zip(user["memories"], r.json()["memories"], strict=True):
            labels.key_of[row["id"]] = m["key"]
    for f in user.get("facts", []):
        body = {"user_id": uid, "category": f["category"], "key": f["key"], "value": f["value"]}
        r = await client.put("/v1/facts", json=body)
        r.raise_for_status()
        labels.key_of[r.json()["id"]] = f"fact:{f['category']}.{f['key']}"
    labels.profile_keys = {m["key"] for m in user["memories"] if m["cls"]} | {
        f"fact:{f['category']}.{f['key']}" for f in user.get("facts", []) if f.get("cls")
    }
    return labels


async def settled(client: httpx.AsyncClient, uid: str, sid: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = (await client.get(f"/v1/sessions/{sid}", params={"user_id": uid})).json()
        if status.get("pending_turns") == 0:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{uid}/{sid} not extracted")


async def ask(client: httpx.AsyncClient, mode: str, uid: str, text: str) -> tuple[list, list, dict]:
    """(profile ids, other ids, cost) of one context block, or of a plain search
    (``search@k``: its top k)."""
    t0 = time.perf_counter()
    if mode.startswith("search"):
        top_k = int(mode.partition("@")[2] or 5)
        r = await client.post("/v1/search", json={"user_id": uid, "query": text, "top_k": top_k})
        r.raise_for_status()
        ms = (time.perf_counter() - t0) * 1000
        return [], [x["id"] for x in r.json()["results"]], {"latency_ms": ms}
    r = await client.post("/v1/context", json={"user_id": uid, "query": text})
    r.raise_for_status()
    ms = (time.perf_counter() - t0) * 1000
    b = r.json()
    prof = [x["id"] for x in b.get("profile", [])]
    prof += [f["id"] for f in b["facts"] if str(f.get("why") or "").startswith("profile")]
    other = [x["id"] for x in b["memories"]]
    other += [f["id"] for f in b["facts"] if not str(f.get("why") or "").startswith("profile")]
    cost = {"latency_ms": ms, "tokens": b["tokens"], "profile_tokens": b.get("profile_tokens", 0)}
    ask.last = b  # type: ignore[attr-defined]  # the body, for calibration
    return prof, other, cost


async def run_variant(
    server, variant: str, data: dict, sources: list[str], args: argparse.Namespace
) -> dict:
    out: dict[str, Any] = {}
    samples: list[Sample] = []
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=120
    ) as c:
        labels: dict[tuple[str, str], Labels] = {}
        for source in sources:
            for u in data["users"]:
                uid = f"{source}-{u['id']}"
                labels[(source, u["id"])] = await load_user(c, u, source, uid)
        modes = [f"search@{k}" for k in args.search_k] if variant == "baseline" else []
        for mode in [*modes, "context"]:
            name = mode if mode.startswith("search") else variant
            for source in sources:
                for text in ("warm up", "hello there"):  # load the owners' caches
                    await ask(c, mode, f"{source}-{data['users'][0]['id']}", text)
                before = procstat.snapshot(server.pids, server.match)
                outs, calls = [], 0
                for i, msg in enumerate(data["messages"]):
                    lab = labels[(source, msg["user"])]
                    uid = f"{source}-{msg['user']}"
                    times = []
                    for _ in range(args.repeat):  # the same block each time; median latency
                        prof, other, cost = await ask(c, mode, uid, msg["text"])
                        times.append(cost["latency_ms"])
                        calls += 1
                    cost["latency_ms"] = percentile(times, 50)
                    o = outcome(lab, msg["needs"], prof, other, msg.get("helpful", ()), **cost)
                    outs.append((i, msg["user"], o))
                    if variant == "nogate" and mode == "context":
                        samples.append(sample(i, source, msg, lab, ask.last))  # type: ignore[attr-defined]
                after = procstat.snapshot(server.pids, server.match)
                cpu = sum(procstat.cpu_by_role(before, after, server.classify).values())
                out[f"{name}/{source}"] = score(outs, labels, source, data) | {
                    "cpu_ms_per_call": round(cpu * 1000 / max(1, calls), 2)
                }
        if variant in ("all", "baseline"):
            out["classifier"] = await classifier_report(c, data, sources, labels)
        if samples:
            out["calibration"] = calibrate(samples, args.max_unneeded)
            out["calibration"]["samples"] = [as_json(x) for x in samples]
    return out


def sample(i: int, source: str, msg: dict, lab: Labels, body: dict) -> Sample:
    """The retrieved candidates of one block (gate off) with their best cosine and score
    (logged per item in the JSON); even positions are the calibration half."""
    cands = [
        Candidate(
            lab.key(m["id"]) or "",
            m.get("similarity"),
            m["content"],
            m.get("score"),
            m.get("topic_similarity"),
        )
        for m in body["memories"]
    ]
    return Sample(msg["text"], frozenset(msg["needs"]), cands, half_of(i, msg), source)


HALVES = ("calibration", "held_out")


def half_of(i: int, msg: dict) -> str:
    """A message's half: the data's own (implicit_needs: by user), else by position
    (the team's set: even positions calibrate, odd ones are held out)."""
    return msg.get("half") or ("calibration" if i % 2 == 0 else "held_out")


def score(outs: list, labels: dict, source: str, data: dict) -> dict:
    """Figures per half and overall (and per kind where the data has kinds); keys are
    qualified by user, so one user's 'city' is not another's."""

    def qualified(seq):
        res = []
        for _, user, o in seq:
            q = lambda keys, u=user: frozenset(f"{u}/{k}" for k in keys)  # noqa: E731
            res.append(
                type(o)(
                    q(o.needed),
                    q(o.got),
                    q(o.outside_profile),
                    o.tokens,
                    o.profile_tokens,
                    o.latency_ms,
                )
            )
        return res

    prof = {f"{u['id']}/{k}" for u in data["users"] for k in labels[(source, u["id"])].profile_keys}
    detail = [
        {
            "i": i,
            "user": user,
            "text": data["messages"][i]["text"],
            "missing": sorted(o.needed - o.got),
            "unneeded": sorted(o.outside_profile - o.needed),
        }
        for i, user, o in outs
        if o.needed - o.got or o.outside_profile - o.needed
    ]
    msgs = data["messages"]
    halves = {h: [x for x in outs if half_of(x[0], msgs[x[0]]) == h] for h in HALVES}
    out = {
        "detail": detail,
        "all": summarise(qualified(outs), prof),
        **{h: summarise(qualified(part), prof) for h, part in halves.items()},
    }
    kinds = sorted({m["kind"] for m in msgs if "kind" in m})
    if kinds:  # per kind, per half (the set's README asks for it)
        out["by_kind"] = {
            h: {
                k: summarise(qualified([x for x in part if msgs[x[0]]["kind"] == k]), prof)
                for k in kinds
            }
            for h, part in halves.items()
        }
    return out


async def classifier_report(c: httpx.AsyncClient, data: dict, sources, labels) -> dict:
    """Which memories GET /v1/users/{id}/profile holds, against their labels."""
    out = {}
    for source in sources:
        pred, truth = {}, {}
        for u in data["users"]:
            lab = labels[(source, u["id"])]
            r = await c.get(f"/v1/users/{source}-{u['id']}/profile")
            if r.status_code == 404:
                return {"error": "no profile route"}
            r.raise_for_status()
            classes = {lab.key(m["id"]): m.get("profile_class") for m in r.json()["memories"]}
            for m in u["memories"]:
                k = f"{u['id']}/{m['key']}"
                truth[k] = m["cls"]
                pred[k] = classes.get(m["key"])
        out[source] = classifier_scores(pred, truth)
    return out


async def locomo(server, variant: str, queries: int) -> dict:
    """LoCoMo dev evidence R@10: /v1/search (hybrid) and the context block's memories.

    With the gate off (``nogate``) every question's block candidates are logged with
    their cosine (``samples``), so a gate can be replayed on a set it was not tuned on."""
    from loadtests.eval_retrieval import evidence_ids, locomo_items, locomo_qa

    convs = json.loads(LOCOMO.read_text())
    rs, rc = [], []
    samples: list[Sample] = []
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=300
    ) as c:
        for conv in convs:
            uid = f"locomo-{conv['sample_id']}"
            items = locomo_items(conv)
            for i in range(0, len(items), 100):
                body = {"user_id": uid, "items": items[i : i + 100]}
                (await c.post("/v1/memories/batch", json=body)).raise_for_status()
            for q in locomo_qa(conv, queries or None):
                gold = evidence_ids(q["evidence"])
                body = {"user_id": uid, "query": q["question"], "top_k": 10}
                r = await c.post("/v1/search", json=body)
                got = {x["metadata"].get("dia_id") for x in r.json()["results"]}
                rs.append(len(gold & got) / len(gold))
                r = await c.post("/v1/context", json={"user_id": uid, "query": q["question"]})
                b = r.json()
                got = {x["metadata"].get("dia_id") for x in b["memories"] + b.get("profile", [])}
                rc.append(len(gold & got) / len(gold))
                if variant == "nogate":
                    samples.append(locomo_sample(q["question"], gold, b))
    out: dict[str, Any] = {
        "questions": len(rs),
        "search_R@10": round(sum(rs) / len(rs), 4),
        "context_block_recall": round(sum(rc) / len(rc), 4),
    }
    if samples:
        out["samples"] = [as_json(x) for x in samples]
    return out


def locomo_sample(question: str, gold: set[str], body: dict) -> Sample:
    """A LoCoMo block's candidates (gate off); profile items are in whatever the gate says."""
    cands = [
        Candidate(
            str(m["metadata"].get("dia_id")),
            m.get("similarity"),
            m["content"],
            m.get("score"),
            m.get("topic_similarity"),
        )
        for m in body["memories"]
    ]
    fixed = frozenset(str(m["metadata"].get("dia_id")) for m in body.get("profile", []))
    return Sample(question, frozenset(gold), cands, "locomo", "locomo", fixed)


def one_variant(variant: str, data: dict, args: argparse.Namespace, tries: int = 3) -> dict:
    """A fresh service per variant; a start that loses a port race is tried again."""
    for attempt in range(1, tries + 1):
        try:
            return _one_variant(variant, data, args)
        except RuntimeError as exc:
            if "exited early" not in str(exc) or attempt == tries:
                raise
            print(f"[{variant}] start failed ({str(exc)[:80]}...), again", flush=True)
    raise AssertionError("unreachable")


async def run_mem0(server, data: dict, args: argparse.Namespace) -> dict:
    """mem0 OSS (loadtests/mem0_peer.py: the same MiniLM, pgvector) as a platform uses
    it: each memory added as a message with ``infer=False`` (stored as said; mem0 keeps
    no type), then its plain search at each top k, scored like a block."""
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as c:
        labels: dict[tuple[str, str], Labels] = {}
        key_by_text: dict[str, dict[str, str]] = {}
        for u in data["users"]:
            uid = f"mem0-{u['id']}"
            key_by_text[u["id"]] = {m["content"]: m["key"] for m in u["memories"]}
            for m in u["memories"]:
                body = {
                    "messages": [{"role": "user", "content": m["content"]}],
                    "user_id": uid,
                    "infer": False,
                }
                (await c.post("/memories", json=body)).raise_for_status()
            lab = Labels(profile_keys={m["key"] for m in u["memories"] if m["cls"]})
            labels[("untyped", u["id"])] = lab
        for k in args.search_k:
            outs = []
            for i, msg in enumerate(data["messages"]):
                body = {"query": msg["text"], "user_id": f"mem0-{msg['user']}", "limit": k}
                t0 = time.perf_counter()
                r = await c.post("/search", json=body)
                r.raise_for_status()
                ms = (time.perf_counter() - t0) * 1000
                rows = r.json()
                rows = rows.get("results", rows) if isinstance(rows, dict) else rows
                texts = key_by_text[msg["user"]]
                lab = labels[("untyped", msg["user"])]
                got = [texts[x["memory"]] for x in rows if x.get("memory") in texts]
                lab.key_of.update({key: key for key in got})
                o = outcome(lab, msg["needs"], [], got, msg.get("helpful", ()), latency_ms=ms)
                outs.append((i, msg["user"], o))
            out[f"mem0@{k}/untyped"] = score(outs, labels, "untyped", data)
    return out


def _one_variant(variant: str, data: dict, args: argparse.Namespace) -> dict:
    if variant == "mem0":
        with mem0_server() as server:
            print(f"[mem0] peer ready in {server.startup_s:.1f}s", flush=True)
            return asyncio.run(run_mem0(server, data, args))
    fake = FakeLLM().start() if "llm" in args.sources else None
    if fake is not None:
        fake.add_responder(ScriptedExtractor(data))
    extra = {"MEMSERVE_LLM_BASE_URL": fake.url} if fake is not None else {}
    try:
        cmd = [sys.executable, "-m", "serve_app", "run"]
        with memserve_server(ROOT, cmd, settings_for(variant, extra)) as server:
            print(f"[{variant}] service ready in {server.startup_s:.1f}s", flush=True)
            res = asyncio.run(run_variant(server, variant, data, args.sources, args))
            if args.locomo_queries >= 0 and variant in ("baseline", "all", "nogate", "timewords"):
                print(f"[{variant}] LoCoMo ...", flush=True)
                res["locomo"] = asyncio.run(locomo(server, variant, args.locomo_queries))
                if variant == "nogate" and "calibration" in res:
                    lo = [Sample(**x) for x in res["locomo"]["samples"]]
                    res["calibration"]["locomo"] = replay_locomo(lo, res["calibration"]["pick"])
            return res
    finally:
        if fake is not None:
            fake.stop()


def print_table(report: dict) -> None:
    cols = (
        "needed_recall",
        "unneeded_share",
        "retrieved_unneeded_share",
        "profile_tokens_mean",
        "tokens_mean",
        "p50_ms",
        "p95_ms",
    )
    print(
        f"\n{'variant/source':22} {'half':12} "
        + " ".join(f"{c[:14]:>14}" for c in cols)
        + f" {'cpu_ms/call':>12}"
    )
    for variant, res in report["variants"].items():
        for key, val in res.items():
            if "/" not in key:
                continue
            for half in ("calibration", "held_out", "all"):
                row = val[half]
                cells = " ".join(f"{row[c]:>14}" for c in cols)
                cpu = val.get("cpu_ms_per_call", "") if half == "all" else ""
                print(f"{key:22} {half:12} {cells} {cpu:>12}")
        if "classifier" in res:
            for src, s in res["classifier"].items():
                print(f"  classifier[{variant}/{src}]: {json.dumps(s)}")
        if "calibration" in res:
            print(f"  evidence gate calibration (pick): {json.dumps(res['calibration']['pick'])}")
        if "locomo" in res:
            print(f"  LoCoMo[{variant}]: {json.dumps(res['locomo'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--variants", default="baseline,profile,split,gate,all")
    ap.add_argument("--sources", default=None, help="default: typed,untyped,llm (team)")
    ap.add_argument("--repeat", type=int, default=3, help="calls per message (best kept)")
    ap.add_argument("--search-k", default="3,5", help="plain search's top_k values")
    ap.add_argument(
        "--data",
        choices=("team", "implicit"),
        default="team",
        help="team: loadtests/data/context_bench.json; implicit: ../shared implicit_needs",
    )
    ap.add_argument("--max-unneeded", type=float, default=0.15, help="calibration's bound")
    ap.add_argument("--locomo-queries", type=int, default=60, help="per conversation; -1: skip")
    args = ap.parse_args()
    default = "typed,untyped" if args.data == "implicit" else ",".join(SOURCES)
    args.sources = [s for s in (args.sources or default).split(",") if s]
    args.search_k = [int(k) for k in args.search_k.split(",") if k]
    if args.locomo_queries >= 0 and not LOCOMO.exists():
        ap.error(f"{LOCOMO} is missing (--locomo-queries -1 skips LoCoMo)")
    if args.data == "implicit":
        if "llm" in args.sources:
            ap.error("--data implicit: sources typed,untyped (the set has no profile classes)")
        data, source = implicit_needs.load(), str(implicit_needs.DEV)
    else:
        data, source = json.loads(DATA.read_text()), str(DATA)
    report: dict[str, Any] = {"variants": {}, "config": vars(args) | {"data": source}}
    for variant in [v for v in args.variants.split(",") if v]:
        report["variants"][variant] = one_variant(variant, data, args)
    print_table(report)
    print(f"\nwrote {write_json('bench_context', report)}")


if __name__ == "__main__":
    main()
