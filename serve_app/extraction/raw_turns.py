"""Without an LLM, raw user turns become searchable episodic memories (session scope,
low importance, one per distinct text): what :class:`ExtractionPipeline` stores instead
of extracting."""

from __future__ import annotations

from serve_app.extraction.junk import clean_turns
from serve_app.extraction.turn import Turn, turn_of
from serve_app.store import NewMemory
from serve_app.store.turns import SessionKey
from serve_app.text import dedupe_hash

__all__ = ["raw_turn_memories"]


def raw_turn_memories(key: SessionKey, rows: list[dict]) -> list[NewMemory]:
    """One episodic memory per distinct cleaned user turn of the claimed rows."""
    fresh: dict[str, tuple[dict, Turn]] = {}
    for r in rows:
        for t in clean_turns([turn_of(r)]):
            if t.role == "user":
                fresh.setdefault(dedupe_hash(t.content), (r, t))
    return [
        NewMemory(
            content=t.content,
            type="episodic",
            scope="session",
            agent_id=r["agent_id"],
            session_id=key.session_id,
            metadata={"session_id": key.session_id, "turn_index": t.turn_index},
            importance=0.3,
            source="turn",
            valid_from=t.occurred_at,
        )
        for r, t in fresh.values()
    ]
