"""Group chats: is what each person says about themselves stored for that person?

Scripted conversations of two to four speakers (the session's user, other users of the
platform, guests without an account, the assistant), with third parties mentioned, the
assistant's suggestions and corrections by another speaker. Every statement carries a
marker word and the person it belongs to. Each conversation is recorded as one group
session and extracted in process (real PostgreSQL, the real encoder and the extraction
pipeline), in two ways:

- ``before``: as the API took conversations until now: no ``name``, no ``speaker_id``
  (everything is the session user's, the prompt shows "user:" for every person);
- ``after``: each message with its ``name`` and, for users of the platform, ``speaker_id``.

Per way: items (memories and facts) stored under the wrong person (a marker of one
platform user under another, a guest's under anyone without naming the guest, the
assistant's suggestion under anyone), items stored under the right person, stale values
(a corrected value still active without the new one) and failed extractions.

The model is either the scripted one (``--llm scripted``: it attributes each statement to
the speaker the prompt shows, as the contract asks; what it stores for whom is then the
service's doing) or any OpenAI-compatible endpoint (``--llm URL``, e.g. the small local
model of ``../shared/llm``).

    python -m loadtests.bench_group_chat                          # scripted model
    python -m loadtests.bench_group_chat --llm http://127.0.0.1:8790/v1 --timeout-s 300

Prints a table and writes loadtests/results/bench_group_chat-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.harness import write_json  # noqa: E402
from models import load_encoder  # noqa: E402
from serve_app.db.embedded import EmbeddedPostgres  # noqa: E402
from serve_app.db.migrations import migrate  # noqa: E402
from serve_app.db.pool import open_pool  # noqa: E402
from serve_app.extraction.pipeline import ExtractionPipeline  # noqa: E402
from serve_app.llm.client import LLMClient  # noqa: E402
from serve_app.settings import Settings  # noqa: E402
from serve_app.store.turns import SessionKey, Speaker, TurnStore  # noqa: E402
from serve_app.store.vectors import ensure_table  # noqa: E402
from serve_app.testing.llm_server import FakeLLM  # noqa: E402

SLUG = "all-minilm-l6-v2-int8"
TENANT = "bench"
ASSISTANT = "assistant"


@dataclass(frozen=True)
class Said:
    """One message: who said it (``who``: a platform user id, ``guest:<Name>``, the
    session's ``owner`` or ``assistant``), its text, and the markers of what it states."""

    who: str
    text: str
    markers: tuple[str, ...] = ()
    name: str | None = None


@dataclass(frozen=True)
class Chat:
    owner: str
    owner_name: str
    said: tuple[Said, ...]
    stale: tuple[tuple[str, str], ...] = ()  # (old marker, new marker) after a correction


def chats() -> list[Chat]:
    """Six group chats; markers are words only that statement uses."""
    return [
        Chat(
            "ann",
            "Ann",
            (
                Said("owner", "I went vegetarian last month.", ("vegetarian",)),
                Said("bo", "Careful with the menu, I'm allergic to walnuts.", ("walnut",), "Bo"),
                Said("guest:Sam", "I just moved to Oslo for a new job.", ("oslo",), "Sam"),
                Said(ASSISTANT, "You could all share a basil pesto pasta.", ("pesto",)),
            ),
        ),
        Chat(
            "cara",
            "Cara",
            (
                Said("owner", "I'm afraid of flying, so I always take trains.", ("flying",)),
                Said("dev", "I have a border collie called Pixel.", ("pixel",), "Dev"),
                Said("guest:Eli", "My sister lives in Lisbon.", ("lisbon",), "Eli"),
                Said("dev", "Cara, you said our trip is in May, right?", (), "Dev"),
                Said("owner", "It was May, but we moved the trip to June.", ("june",)),
            ),
            stale=(("may", "june"),),
        ),
        Chat(
            "fay",
            "Fay",
            (
                Said("gus", "I started learning the cello this autumn.", ("cello",), "Gus"),
                Said("hal", "I'm training for a half marathon in September.", (), "Hal"),
                Said("owner", "I work night shifts at the hospital.", ("night shift",)),
                Said("gus", "Hal, didn't your race move?", (), "Gus"),
                Said("hal", "Right, the half marathon moved to October.", ("october",), "Hal"),
            ),
            stale=(("september", "october"),),
        ),
        Chat(
            "ivy",
            "Ivy",
            (
                Said("guest:Jon", "I'm lactose intolerant, no cheese.", ("lactose",), "Jon"),
                Said("owner", "And I'm allergic to cats.", ("cats",)),
                Said(ASSISTANT, "A kitten could cheer up your flat!", ("kitten",)),
            ),
        ),
        Chat(
            "kim",
            "Kim",
            (
                Said("lee", "I'm relocating to Berlin in March.", ("berlin",), "Lee"),
                Said("max", "My daughter Zoe turns five next week.", ("zoe",), "Max"),
                Said("guest:Noa", "I just got promoted to team lead!", ("team lead",), "Noa"),
                Said("owner", "I prefer meetings before noon.", ("noon",)),
            ),
        ),
        Chat(
            "oli",
            "Oli",
            (
                Said("pam", "I only read science fiction.", ("science fiction",), "Pam"),
                Said("owner", "I'm reading War and Peace at the moment.", ("war and peace",)),
                Said(ASSISTANT, "Try an audiobook of Dune next.", ("dune",)),
            ),
        ),
    ]


# ---------------------------------------------------------------- the scripted model

_LINE = re.compile(r"^\[(\d+)\] (?:\([^)]*\) )?(user|assistant)(?: (\w+))?(?: \(([^)]*)\))?: (.*)$")


def scripted_answer(kind: str, messages: list[dict[str, Any]]) -> str | None:
    """A model that follows the contract: each user statement becomes a memory about the
    speaker the prompt shows ("me" when it shows none); assistant turns become nothing."""
    if kind != "extract":
        return None
    items = []
    for line in str(messages[-1]["content"]).splitlines():
        m = _LINE.match(line)
        if m is None or m.group(2) != "user":
            continue
        alias, name, text = m.group(3) or "me", m.group(4), m.group(5)
        subject = name if alias != "me" and name else "The user"
        items.append(
            {
                "type": "fact",
                "content": f"{subject} said: {text}",
                "importance": 0.7,
                "confidence": 0.9,
                "about": alias,
            }
        )
    return json.dumps({"memories": items, "facts": []})


# ---------------------------------------------------------------- scoring


def truth(chat: Chat, said: Said) -> str | None:
    """The user id a statement belongs to (None: nobody's: a guest's or the assistant's)."""
    if said.who == "owner":
        return chat.owner
    if said.who.startswith("guest:") or said.who == ASSISTANT:
        return None
    return said.who


def score(chat: Chat, stored: dict[str, list[str]]) -> dict[str, int]:
    """``stored``: user id -> the texts of their active memories and facts."""
    out = {"wrong_person": 0, "right_person": 0, "stale": 0, "expected": 0}
    for said in chat.said:
        owner = truth(chat, said)
        for marker in said.markers:
            out["expected"] += owner is not None
            for user, texts in stored.items():
                hits = [t for t in texts if marker in t.lower()]
                if not hits:
                    continue
                if owner == user:
                    out["right_person"] += 1
                elif said.who.startswith("guest:") and all(
                    said.name and said.name.lower() in t.lower() for t in hits
                ):
                    pass  # the user's knowledge about a guest, naming them: allowed
                else:
                    out["wrong_person"] += len(hits)
    for old, new in chat.stale:
        for texts in stored.values():
            out["stale"] += sum(old in t.lower() and new not in t.lower() for t in texts)
    return out


# ---------------------------------------------------------------- the run


def speaker_of(said: Said, ids: dict[str, str]) -> Speaker:
    """How a platform sends who said ``said``: a name, and a user id for its users."""
    if said.who in ("owner", ASSISTANT):
        return Speaker()
    if said.who.startswith("guest:"):
        return Speaker(said.name)
    return Speaker(said.name, ids[said.who])


async def stored_texts(pool: Any, user_id: str) -> list[str]:
    """The user's active extracted memories and facts, as texts."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT content FROM memory_items WHERE tenant_id = %s AND user_id = %s"
            " AND source = 'extraction' AND valid_until IS NULL",
            (TENANT, user_id),
        )
        texts = [r["content"] for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT key, value FROM facts WHERE tenant_id = %s AND user_id = %s"
            " AND valid_until IS NULL",
            (TENANT, user_id),
        )
        return texts + [f"{r['key']}: {r['value']}" for r in await cur.fetchall()]


async def run_way(
    pool: Any, pipeline: ExtractionPipeline, chat: Chat, way: str, run: str
) -> dict[str, Any]:
    """One chat recorded and extracted one way; what each person ends up with, scored."""
    key = SessionKey(TENANT, f"{chat.owner}-{way}-{run}", "group")
    users = {s.who for s in chat.said if truth(chat, s) not in (None, chat.owner)}
    ids = {who: f"{who}-{way}-{run}" for who in users}
    messages = [("assistant" if s.who == ASSISTANT else "user", s.text) for s in chat.said]
    speakers = [speaker_of(s, ids) for s in chat.said] if way == "after" else None
    await TurnStore(pool).append(key, messages, agent_id=None, ttl_hours=1.0, speakers=speakers)
    started = time.perf_counter()
    out = await pipeline.process_session(key)  # extraction only: no summary call
    seconds = time.perf_counter() - started
    stored = {chat.owner: await stored_texts(pool, key.user_id)}
    for who, uid in ids.items():
        stored[who] = await stored_texts(pool, uid)
    return {
        "chat": chat.owner,
        "failed": out.error is not None,
        "error": out.error,
        "seconds": round(seconds, 1),
        "stored": stored,
        **score(chat, stored),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    fake = None
    if args.llm == "scripted":
        fake = FakeLLM().start()
        fake.add_responder(scripted_answer)
        base_url = fake.url
    else:
        base_url = args.llm
    settings = Settings().with_(
        llm={
            "base_url": base_url,
            "model": args.model,
            "api_key": "x",
            "timeout_s": args.timeout_s,
            "max_retries": 0,
            "max_tokens": args.max_tokens,
        },
        extract={"max_attempts": 1, "compress_every_m_turns": 1000},
    )
    encoder = load_encoder(SLUG, threads=1)
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    run = time.strftime("%H%M%S")
    with tempfile.TemporaryDirectory(prefix="bench-group-") as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        dsn = pg.start()
        try:
            migrate(dsn)
            ensure_table(dsn, encoder.spec.table_slug, encoder.spec.dim)
            pool = await open_pool(dsn, settings, min_size=1)

            async def embed(texts: Sequence[str], *, is_query: bool) -> Any:
                return await asyncio.to_thread(encoder.encode, list(texts), is_query=is_query)

            llm = LLMClient(settings.llm)
            pipeline = ExtractionPipeline(pool, encoder.spec.table_slug, embed, llm, settings)
            try:
                for chat in chats()[: args.chats]:
                    for way in ("before", "after"):
                        r = await run_way(pool, pipeline, chat, way, run)
                        results[way].append(r)
                        print(
                            f"{chat.owner:5} {way:6} wrong={r['wrong_person']} "
                            f"right={r['right_person']}/{r['expected']} stale={r['stale']} "
                            f"failed={r['failed']} {r['seconds']}s",
                            flush=True,
                        )
            finally:
                await llm.close()
                await pool.close()
        finally:
            pg.stop()
            if fake is not None:
                fake.stop()
    totals = {
        way: {
            k: sum(r[k] for r in rs)
            for k in ("wrong_person", "right_person", "expected", "stale", "failed")
        }
        | {"seconds": round(sum(r["seconds"] for r in rs), 1)}
        for way, rs in results.items()
    }
    return {"llm": args.llm, "model": args.model, "totals": totals, "chats": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llm", default="scripted", help="'scripted' or an endpoint's base URL")
    ap.add_argument("--model", default="local")
    ap.add_argument("--chats", type=int, default=6)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--max-tokens", type=int, default=512)
    args = ap.parse_args()
    out = asyncio.run(main_async(args))
    print(json.dumps(out["totals"], indent=2))
    print(write_json("bench_group_chat", out))


if __name__ == "__main__":
    main()
