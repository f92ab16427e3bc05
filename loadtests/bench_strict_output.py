"""Strict ``json_schema`` output against ``json_object`` on a real model, same prompts.

Sends the service's own extraction and summary prompts (serve_app/extraction/prompts.py)
over slices of the LoCoMo dev conversations to an OpenAI-compatible endpoint, once per
response format, in alternation (strict, loose, strict, ...) so that drift of the machine
hits both alike. Per format: answers with no usable JSON object (``BadOutput``), answers
that validate but had items dropped for breaking the contract, items kept, and seconds per
call (median and max). Meant for the small local model of ``../shared/llm`` (start it with
``../shared/llm/start.sh``); never part of ``make test``.

    python -m loadtests.bench_strict_output --base-url http://127.0.0.1:8790/v1 --slices 8

Prints a table and writes loadtests/results/bench_strict_output-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serve_app.extraction.dates import parse_when
from serve_app.extraction.parser import (
    EXTRACTION_SCHEMA,
    SUMMARY_SCHEMA,
    BadOutput,
    parse_extraction,
    parse_summary,
)
from serve_app.extraction.prompts import (
    EXTRACT_SYSTEM,
    SUMMARY_SYSTEM,
    extraction_user_prompt,
    summary_user_prompt,
)
from serve_app.extraction.turn import Turn
from serve_app.llm.answer_schema import ResponseSchema
from serve_app.llm.client import LLMClient, LLMUnavailable
from serve_app.settings import LLMSettings

REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "data" / "locomo-dev.json"
RESULTS = REPO / "loadtests" / "results"


@dataclass
class Tally:
    calls: int = 0
    invalid: int = 0  # no usable JSON object, or the contract's key missing
    with_dropped: int = 0  # valid answers that had items dropped
    dropped: int = 0
    items: int = 0
    unavailable: int = 0
    seconds: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        s = self.seconds
        return {
            "calls": self.calls,
            "invalid": self.invalid,
            "invalid_share": round(self.invalid / self.calls, 3) if self.calls else None,
            "answers_with_dropped_items": self.with_dropped,
            "items_dropped": self.dropped,
            "items_kept": self.items,
            "unavailable": self.unavailable,
            "s_per_call_median": round(statistics.median(s), 2) if s else None,
            "s_per_call_max": round(max(s), 2) if s else None,
        }


def slices(path: Path, count: int, turns: int) -> list[list[Turn]]:
    """``count`` slices of ``turns`` turns from the sessions of the LoCoMo conversations,
    the first speaker of each conversation as the user, the other as the assistant."""
    out: list[list[Turn]] = []
    for conv in json.loads(path.read_text()):
        c = conv["conversation"]
        n = 1
        while f"session_{n}" in c and len(out) < count:
            when = parse_when(c.get(f"session_{n}_date_time", "").split(" on ")[-1])
            said = [
                Turn(
                    "user" if t["speaker"] == c["speaker_a"] else "assistant",
                    t["text"],
                    i + 1,
                    when or datetime(2023, 1, 1, tzinfo=UTC),
                )
                for i, t in enumerate(c[f"session_{n}"][:turns])
            ]
            out.append(said)
            n += 2  # every other session: more conversations before ``count`` is reached
        if len(out) >= count:
            break
    return out


async def one(
    llm: LLMClient, kind: str, chunk: list[Turn], schema: ResponseSchema | None, t: Tally
) -> None:
    system, user = (
        (EXTRACT_SYSTEM, extraction_user_prompt(chunk))
        if kind == "extract"
        else (SUMMARY_SYSTEM, summary_user_prompt(chunk))
    )
    t.calls += 1
    start = time.perf_counter()
    try:
        answer = await llm.complete_json(system, user, schema=schema)
    except LLMUnavailable:
        t.unavailable += 1
        return
    t.seconds.append(time.perf_counter() - start)
    try:
        if kind == "extract":
            parsed = parse_extraction(answer)
            t.items += len(parsed.memories) + len(parsed.facts)
            t.dropped += parsed.dropped
            t.with_dropped += parsed.dropped > 0
        else:
            parse_summary(answer)
            t.items += 1
    except BadOutput:
        t.invalid += 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = LLMSettings(
        base_url=args.base_url,
        model=args.model,
        api_key="x",
        timeout_s=args.timeout_s,
        max_retries=0,
        max_tokens=args.max_tokens,
    )
    llm = LLMClient(config)
    tallies = {(k, f): Tally() for k in ("extract", "summary") for f in ("strict", "object")}
    schemas = {"extract": EXTRACTION_SCHEMA, "summary": SUMMARY_SCHEMA}
    try:
        for chunk in slices(LOCOMO, args.slices, args.turns):
            for kind in ("extract", "summary"):
                await one(llm, kind, chunk, schemas[kind], tallies[kind, "strict"])
                await one(llm, kind, chunk, None, tallies[kind, "object"])
    finally:
        await llm.close()
    return {
        "endpoint": args.base_url,
        "model": args.model,
        "slices": args.slices,
        "turns_per_slice": args.turns,
        "max_tokens": args.max_tokens,
        "strict_refused": llm.answer_format(SUMMARY_SCHEMA) == "json_object",
        "results": {f"{k}/{f}": t.summary() for (k, f), t in tallies.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8790/v1")
    ap.add_argument("--model", default="local")
    ap.add_argument("--slices", type=int, default=8)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    args = ap.parse_args()
    out = asyncio.run(run(args))
    head = ("prompt/format", "calls", "invalid", "dropped", "kept", "s med", "s max")
    print("{:18} {:>5} {:>7} {:>7} {:>5} {:>6} {:>6}".format(*head))
    for name, r in out["results"].items():
        print(
            f"{name:18} {r['calls']:>5} {r['invalid']:>7} {r['items_dropped']:>7} "
            f"{r['items_kept']:>5} {r['s_per_call_median']!s:>6} {r['s_per_call_max']!s:>6}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_strict_output-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    print(path)


if __name__ == "__main__":
    main()
