"""Knowledge-update benchmark (issue 22): does memory stay true when the user's life changes?

Starts the real service (as the e2e tests do) with the scripted LLM of
``loadtests/knowledge_scenarios.py`` and plays synthetic users through four dated
sessions each over HTTP (``POST /v1/sessions/{sid}/turns`` with ``occurred_at``,
then ``/end``). Three cohorts share the run: ``good`` (a model that reconciles from
the memories it is shown), ``sloppy`` (ADDs everything on 30% of calls, invents 15%
of its aliases) and ``today`` (ignores what it is shown: extraction before issue 22).
Then, per cohort:

- stale-value rate: (user, attribute) pairs whose ``/v1/context`` block for the
  attribute's question carries a value that is no longer true (goal 0 for ``good``);
- precision@1: ``/v1/search`` "where does the user live now"-style questions whose
  top hit is the current value;
- as_of accuracy: the same questions ``as_of`` a day between sessions, top hit = the
  value true then;
- prompt tokens per extracted turn, against the same prompts without the reconcile
  part (today's prompt; goal <= +50%); extraction throughput (turns/s, wall clock);
- spend (issue 31): the tokens the scripted model served per extracted turn (prompt,
  completion, cached by its prefix cache), the cached share against the same prompts in
  the old order (reconcile rules before the tenant's guidance), max_tokens reserved per
  call sized from the batch against the fixed cap, and the metered totals of
  ``GET /v1/admin/usage`` against what the model served.

Prints the JSON and writes ``loadtests/results/bench_knowledge_update-<time>.json``.

    python -m loadtests.bench_knowledge_update               # 6 users per cohort
    python -m loadtests.bench_knowledge_update --users 3
    python -m loadtests.bench_knowledge_update --guidance "Write in the third person."
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import timedelta
from typing import Any

import httpx

from loadtests.harness import fresh_service, write_json
from loadtests.knowledge_scenarios import DATES, QUESTIONS, ScriptedModel, User, make_user
from serve_app.extraction.prompts import EXTRACT_SYSTEM
from serve_app.extraction.reconcile import KNOWN_HEADER, RECONCILE_RULES
from serve_app.testing.llm_server import FakeLLM, PrefixCache
from serve_app.text import count_tokens

COHORTS = ("good", "sloppy", "today")
ENV = {
    "MEMSERVE_LLM_MODEL": "scripted",
    "MEMSERVE_LLM_TIMEOUT_S": "10",
    "MEMSERVE_EXTRACT_EVERY_N_TURNS": "4",
    "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "1",
}
ADMIN_KEY = "msk_bench_knowledge_admin_0123456789"
LLM_MAX_TOKENS = 1024  # MEMSERVE_LLM_MAX_TOKENS's default: the fixed cap before issue 31


async def play(client: httpx.AsyncClient, users: list[User]) -> None:
    """Every user's sessions in date order (users in parallel, sessions one after another:
    a session's extraction is awaited before the next one starts, as weeks would pass)."""

    async def one(u: User) -> None:
        for i, session in enumerate(u.sessions):
            sid = f"s{i}"
            day = DATES[i]
            msgs: list[dict[str, Any]] = []
            for j, st in enumerate(session):
                at = (day + timedelta(minutes=2 * j)).isoformat()
                msgs.append({"role": "user", "content": st.turn, "occurred_at": at})
                msgs.append(
                    {"role": "assistant", "content": "Thanks for telling me!", "occurred_at": at}
                )
            r = await client.post(
                f"/v1/sessions/{sid}/turns", json={"user_id": u.user_id, "messages": msgs}
            )
            r.raise_for_status()
            (
                await client.post(f"/v1/sessions/{sid}/end", json={"user_id": u.user_id})
            ).raise_for_status()
            await settled(client, u.user_id, sid)

    await asyncio.gather(*(one(u) for u in users))


async def settled(client: httpx.AsyncClient, user_id: str, sid: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = await client.get(f"/v1/sessions/{sid}", params={"user_id": user_id})
        status = r.json()
        if status["pending_turns"] == 0 and status["failed_turns"] == 0:
            return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"{user_id}/{sid} not extracted: {status}")


async def judge(client: httpx.AsyncClient, u: User) -> dict[str, list[Any]]:
    """Per metric, 1/0 outcomes for this user (and its misses, to read)."""
    out: dict[str, list[Any]] = {"stale": [], "p_at_1": [], "as_of": [], "misses": []}
    for attribute, question in QUESTIONS.items():
        r = await client.post("/v1/context", json={"user_id": u.user_id, "query": question})
        r.raise_for_status()
        block = r.json()["context"]
        out["stale"].append(int(any(old in block for old in u.stale(attribute))))
        current = u.current(attribute)
        if current is not None:
            top = await top_hit(client, u.user_id, question)
            out["p_at_1"].append(int(top == current))
            if top != current:
                out["misses"].append({"q": question, "want": current, "got": top})
        for i in range(len(DATES) - 1):  # a day before each later session
            when = DATES[i + 1] - timedelta(days=1)
            expected = u.at(attribute, when)
            if expected is None:
                continue
            top = await top_hit(client, u.user_id, question, as_of=when.isoformat())
            out["as_of"].append(int(top == expected))
            if top != expected:
                out["misses"].append(
                    {"q": question, "as_of": when.date().isoformat(), "want": expected, "got": top}
                )
    return out


async def top_hit(client: httpx.AsyncClient, user_id: str, query: str, **extra: Any) -> str | None:
    body = {"user_id": user_id, "query": query, "top_k": 1, **extra}
    r = await client.post("/v1/search", json=body)
    r.raise_for_status()
    results = r.json()["results"]
    return results[0]["content"] if results else None


def second_call_tokens(user: str, answers: dict[str, str]) -> int:
    """What reconciling in a second call would cost for this batch: its own instructions
    (the rules plus a framing line), the extracted candidates and the known block."""
    if KNOWN_HEADER not in user:
        return 0
    block = user.split("\n\n" + KNOWN_HEADER, 1)[1]
    memories = json.loads(answers.get(user, "{}")).get("memories", [])
    candidates = "\n".join(f"c{i}: {m.get('content', '')}" for i, m in enumerate(memories, 1))
    framing = "Decide for each candidate memory against the known ones; answer JSON."
    return count_tokens(RECONCILE_RULES) + count_tokens(framing + candidates + block)


def token_report(calls: list[dict[str, Any]], model: ScriptedModel) -> dict[str, Any]:
    """Prompt tokens per extracted turn, with and without the reconcile part, per cohort
    (and what a separate reconcile call would have cost)."""
    answers = dict(model.answers)
    per: dict[str, dict[str, float]] = {}
    for call in calls:
        system = str(call["messages"][0]["content"])
        user = str(call["messages"][-1]["content"])
        cohort = model.cohort_of(user)
        turns = sum(1 for line in user.splitlines() if line.startswith("["))
        today_user = user.split("\n\n" + KNOWN_HEADER, 1)[0]
        today_system = system.replace("\n" + RECONCILE_RULES, "")
        agg = per.setdefault(
            cohort,
            {
                "calls": 0,
                "turns": 0,
                "tokens": 0,
                "today_tokens": 0,
                "known_shown": 0,
                "two_call_tokens": 0,
            },
        )
        agg["calls"] += 1
        agg["turns"] += turns
        agg["tokens"] += count_tokens(system) + count_tokens(user)
        agg["today_tokens"] += count_tokens(today_system) + count_tokens(today_user)
        agg["known_shown"] += int(KNOWN_HEADER in user)
        agg["two_call_tokens"] += count_tokens(today_system) + count_tokens(today_user)
        agg["two_call_tokens"] += second_call_tokens(user, answers)
    for agg in per.values():
        agg["tokens_per_turn"] = round(agg["tokens"] / max(1, agg["turns"]), 1)
        agg["today_tokens_per_turn"] = round(agg["today_tokens"] / max(1, agg["turns"]), 1)
        agg["increase"] = round(agg["tokens"] / max(1, agg["today_tokens"]) - 1, 3)
        agg["two_call_increase"] = round(
            agg["two_call_tokens"] / max(1, agg["today_tokens"]) - 1, 3
        )
    return per


def old_order(system: str) -> str:
    """The system prompt as it was before issue 31: reconcile rules before the guidance."""
    rules = "\n" + RECONCILE_RULES
    if rules not in system or not system.startswith(EXTRACT_SYSTEM):
        return system
    guidance = system[len(EXTRACT_SYSTEM) : system.index(rules)]
    return EXTRACT_SYSTEM + rules + guidance


def spend_report(calls: list[dict[str, Any]], metered: dict[str, Any], cap: int) -> dict:
    """Tokens per extracted turn as the scripted model served (billed) them, the cached
    share against the old prompt order (same calls, same cache model), max_tokens
    reserved per call against the fixed cap, and metered vs served."""
    served = [c for c in calls if c.get("usage")]
    turns = sum(
        sum(1 for line in str(c["messages"][-1]["content"]).splitlines() if line.startswith("["))
        for c in served
    )
    old = PrefixCache()
    old_cached = 0
    for c in served:
        system, user = (str(m["content"]) for m in c["messages"][:2])
        old_cached += old.cached(old_order(system) + "\n" + user)
    total = {k: sum(c["usage"][k] for c in served) for k in ("prompt_tokens", "completion_tokens")}
    cached = sum(c["usage"]["prompt_tokens_details"]["cached_tokens"] for c in served)
    sized = sum(int(c["body"].get("max_tokens") or cap) for c in served)
    per = max(1, turns)
    extract = next((r for r in metered.get("rows", []) if r["purpose"] == "extract"), {})
    return {
        "calls": len(served),
        "turns": turns,
        "prompt_per_turn": round(total["prompt_tokens"] / per, 1),
        "completion_per_turn": round(total["completion_tokens"] / per, 1),
        "cached_per_turn": round(cached / per, 1),
        "cached_per_turn_old_order": round(old_cached / per, 1),
        "uncached_prompt_per_turn": round((total["prompt_tokens"] - cached) / per, 1),
        "uncached_prompt_per_turn_old_order": round((total["prompt_tokens"] - old_cached) / per, 1),
        "max_tokens_per_call": round(sized / max(1, len(served)), 1),
        "max_tokens_per_call_fixed_cap": cap,
        "metered_extract": {
            k: extract.get(k)
            for k in ("calls", "prompt_tokens", "completion_tokens", "cached_tokens")
        },
        "metered_equals_served": extract.get("calls") == len(served)
        and extract.get("prompt_tokens") == total["prompt_tokens"]
        and extract.get("completion_tokens") == total["completion_tokens"],
    }


def rate(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


async def measure(svc, fake: FakeLLM, users: list[User], model: ScriptedModel) -> dict:
    headers = {"Authorization": f"Bearer {svc.bootstrap_key}"}
    async with httpx.AsyncClient(base_url=svc.base_url, headers=headers, timeout=60) as client:
        started = time.perf_counter()
        await play(client, users)
        wall = time.perf_counter() - started
        judged = [await judge(client, u) for u in users]
    cohorts: dict[str, Any] = {}
    for cohort in COHORTS:
        mine = [j for u, j in zip(users, judged, strict=True) if u.cohort == cohort]
        cohorts[cohort] = {
            "users": len(mine),
            "stale_value_rate": rate([x for j in mine for x in j["stale"]]),
            "precision_at_1": rate([x for j in mine for x in j["p_at_1"]]),
            "as_of_accuracy": rate([x for j in mine for x in j["as_of"]]),
            "misses_sample": [x for j in mine for x in j["misses"]][:8],
        }
    turns = sum(2 * len(s) for u in users for s in u.sessions)
    calls = fake.calls("extract")
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=svc.base_url, headers=admin, timeout=60) as client:
        r = await client.get("/v1/admin/usage", params={"group_by": "purpose"})
        metered = r.json() if r.status_code == 200 else {"error": r.text}
    tokens = token_report(calls, model)
    for cohort, agg in tokens.items():
        if cohort in cohorts:
            cohorts[cohort]["prompt_tokens"] = agg
    return {
        "cohorts": cohorts,
        "turns": turns,
        "extraction_calls": len(calls),
        "wall_s": round(wall, 1),
        "throughput_turns_per_s": round(turns / wall, 2),
        "sloppy_invented_aliases": model.invented,
        "spend": spend_report(calls, metered, LLM_MAX_TOKENS),
        "metered_by_purpose": metered.get("rows"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=6, help="users per cohort")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--no-reconcile", action="store_true", help="today's prompt (baseline)")
    ap.add_argument("--guidance", default="", help="tenant guidance (custom instructions)")
    ap.add_argument("--no-sizing", action="store_true", help="max_tokens at the fixed cap")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    users = [
        make_user(f"ku-{c}-{c[0]}{n:02d}{rng.randrange(10**4):04d}", c, rng)
        for c in COHORTS
        for n in range(args.users)
    ]
    model = ScriptedModel(users, seed=args.seed)
    fake = FakeLLM().start()
    fake.add_responder(model)
    try:
        env = {
            **ENV,
            "MEMSERVE_EXTRACT_RECONCILE": str(not args.no_reconcile).lower(),
            "MEMSERVE_ADMIN_KEY": ADMIN_KEY,
            "MEMSERVE_EXTRACT_CUSTOM_INSTRUCTIONS": args.guidance,
        }
        if args.no_sizing:
            env["MEMSERVE_EXTRACT_ANSWER_TOKENS_PER_TURN"] = "0"
        with fresh_service(MEMSERVE_LLM_BASE_URL=fake.url, **env) as svc:
            result = asyncio.run(measure(svc, fake, users, model))
    finally:
        fake.stop()
    result["config"] = {
        "users_per_cohort": args.users,
        "seed": args.seed,
        "sessions_per_user": len(DATES),
        "reconcile": not args.no_reconcile,
        "guidance": args.guidance,
        "sized_max_tokens": not args.no_sizing,
    }
    print(json.dumps(result, indent=2))
    name = "bench_knowledge_update" + ("-no_reconcile" if args.no_reconcile else "")
    print(f"wrote {write_json(name, result)}")


if __name__ == "__main__":
    main()
