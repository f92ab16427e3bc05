"""Prompts for extraction and episodic summaries (the JSON contract of DESIGN §4).

The first line of each system prompt is a stable marker so logs (and the test
LLM) can tell the two kinds of call apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from serve_app.extraction.speakers import Speakers
from serve_app.extraction.turn import Turn
from serve_app.settings import Settings
from serve_app.text import count_tokens

EXTRACT_MARKER = "[memserve:extract:v1]"
SUMMARY_MARKER = "[memserve:summarize:v1]"

EXTRACT_SYSTEM = f"""{EXTRACT_MARKER}
You maintain long-term memory about a user of a chat assistant. Read the
conversation and write down only what will still be useful in future
conversations with this user.

Keep: who the user is, what they like or dislike, constraints they live with,
standing instructions for the assistant, how they want things done, and notable
events or plans with their concrete details.
Skip: small talk, questions without lasting value, the assistant's own
knowledge or advice, anything only true for this moment, and anything the
assistant merely repeats from what it already knew about the user.

Each memory must stand on its own: keep the context that makes it meaningful.
  bad:  "budget is $10,000"
  good: "The user's budget for the Hawaii vacation is $10,000"

Memory types:
  fact        a stable fact about the user or their world
  preference  a like, dislike or chosen way of doing things
  procedural  an instruction or how-to the assistant should follow
  episodic    an event or plan, with when/where if known
  insight     a pattern you infer from several statements (use sparingly)
class: instruction (a standing instruction to the assistant), constraint (an allergy,
  diet, health need, accessibility need or budget), identity (name, where they live,
  family, work) or none; these are shown in every answer's context.
importance: 0..1, how much this should shape future answers.
confidence: 0..1, how sure you are that the user really means it.

Structured facts are key/value pairs for deterministic lookup, with category
one of identity, preference, constraint, instruction and a short snake_case
key (name, location, language, diet, timezone, ...). Use the same key for the
same attribute; a new value for a key replaces the old one.

Dates: each turn shows the day it was said. Write relative dates as dates resolved
against their turn's day ("last Tuesday" said on Thu 2026-11-19 -> "on 2026-11-17").
"valid_from" (YYYY-MM-DD, optional): when a memory or fact became true, if the
conversation says ("moved here in March 2024" -> "2024-03-01").

Answer with one JSON object and nothing else:
{{"memories": [{{"type": "...", "content": "...", "class": "none", "importance": 0.0,
"confidence": 0.0, "tags": ["..."], "valid_from": "YYYY-MM-DD"}}], "facts": [{{"category": "...",
"key": "...", "value": "...", "confidence": 0.0, "importance": 0.0,
"valid_from": "YYYY-MM-DD"}}]}}
Either list may be empty. A fact's importance (0..1) says how much it should shape
every answer (a name, a diet or a standing instruction: high; trivia: low)."""

SUMMARY_SYSTEM = f"""{SUMMARY_MARKER}
Summarise this part of a conversation between a user and an assistant for the
assistant's long-term memory: what the user wanted, what was decided or found
out, and concrete details (names, numbers, dates) worth recalling later. Write
2-5 sentences in the third person ("The user ..."). Do not add anything that
was not said.
Answer with one JSON object and nothing else: {{"summary": "..."}}"""


def day(when: datetime) -> str:
    """``Thu 2026-11-19``: the weekday lets the model resolve "last Tuesday"."""
    return when.astimezone(UTC).strftime("%a %Y-%m-%d")


def format_turns(turns: Sequence[Turn], speakers: Speakers | None = None) -> str:
    """``[n] role: text``, with the day in front whenever it differs from the turn
    before (each turn's date at the cost of one date per day, not per turn); with
    several speakers, ``[n] user s1 (Sam): text``."""
    lines, shown = [], None
    for t in turns:
        when = day(t.occurred_at) if t.occurred_at is not None else None
        stamp = f"({when}) " if when is not None and when != shown else ""
        shown = when or shown
        who = speakers.label(t) if speakers else t.role
        lines.append(f"[{t.turn_index}] {stamp}{who}: {t.content}")
    return "\n".join(lines)


def session_date(turns: Sequence[Turn]) -> datetime | None:
    """The conversation's "today": the day of its latest dated turn."""
    return max((t.occurred_at for t in turns if t.occurred_at is not None), default=None)


def extraction_user_prompt(turns: Sequence[Turn], speakers: Speakers | None = None) -> str:
    today = session_date(turns)
    head = f"Session date: {day(today)}\n" if today is not None else ""
    if speakers:
        head += speakers.block()
    return head + "Conversation:\n" + format_turns(turns, speakers)


def summary_user_prompt(turns: Sequence[Turn], speakers: Speakers | None = None) -> str:
    first, last = turns[0].turn_index, turns[-1].turn_index
    head = speakers.block() if speakers else ""
    return head + f"Turns {first}-{last}:\n" + format_turns(turns, speakers)


def truncate_tokens(text: str, max_tokens: int) -> str:
    """``text`` cut (at a word boundary when possible) to about ``max_tokens`` tokens."""
    if count_tokens(text) <= max_tokens:
        return text
    cut = text[: max(1, max_tokens * 3)]
    while cut and count_tokens(cut + " [...]") > max_tokens:
        cut = cut[: int(len(cut) * 0.9)]
    head = cut.rsplit(" ", 1)[0] if " " in cut[len(cut) // 2 :] else cut
    return head + " [...]"


def chunk_turns(
    turns: Sequence[Turn], max_prompt_tokens: int, max_turn_tokens: int
) -> list[list[Turn]]:
    """Turns split into prompts that fit ``max_prompt_tokens`` (over-long turns truncated),
    so "context too long" cannot happen by construction."""
    per_turn = max(16, min(max_turn_tokens, max_prompt_tokens - 16))
    chunks: list[list[Turn]] = [[]]
    head = count_tokens("Session date: Thu 2026-11-19\nConversation:")
    used = head
    for t in turns:
        t = replace(t, content=truncate_tokens(t.content, per_turn))
        cost = count_tokens(format_turns([t])) + 1
        if chunks[-1] and used + cost > max_prompt_tokens:
            chunks.append([])
            used = head
        chunks[-1].append(t)
        used += cost
    return [c for c in chunks if c]


def answer_tokens(settings: Settings, chunk: Sequence[Turn], shown: int) -> int | None:
    """max_tokens of one extraction call: what this batch can need (a base, per user turn,
    per memory/fact shown), never above ``llm.max_tokens``: smaller budget reservations,
    and a runaway answer stops sooner. None (the configured cap) when sizing is off."""
    s = settings.extract
    if s.answer_tokens_per_turn <= 0:
        return None
    users = sum(1 for t in chunk if t.role == "user")
    want = (
        s.answer_tokens_base + s.answer_tokens_per_turn * users + s.answer_tokens_per_known * shown
    )
    return min(settings.llm.max_tokens, want)
