"""Extraction pipeline, independent of Ray: pending turns -> LLM -> dedup/conflicts -> store.

``deployments/extractor.py`` wraps one :class:`ExtractionPipeline` per replica;
tests build it with a real database, the local encoder and the fake LLM.

Failure policy: an unavailable LLM (down, slow, 5xx, breaker open) releases the
claimed turns untouched (``extracted_at`` stays NULL) so a later trigger or the
periodic scan extracts them; an unusable answer counts an attempt and after
``extract_max_attempts`` the batch is dead-lettered (``extract_error`` set).
Nothing here raises into the chat path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from psycopg_pool import AsyncConnectionPool

from serve_app.extraction.junk import CONTEXT_OPEN, Turn, clean_turns, contained, sentences
from serve_app.extraction.llm import LLMClient, LLMUnavailable
from serve_app.extraction.parser import BadOutput, ExtractedMemory, parse_extraction, parse_summary
from serve_app.extraction.prompts import (
    EXTRACT_SYSTEM,
    SUMMARY_SYSTEM,
    extraction_user_prompt,
    summary_user_prompt,
)
from serve_app.metrics import ExtractionMetrics
from serve_app.settings import Settings
from serve_app.store import MemoryStore, NewMemory, Owner
from serve_app.store.facts import FactStore
from serve_app.store.memory_index import MemoryIndex
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.text import dedupe_hash

log = logging.getLogger(__name__)
INFER_PREFIX = "infer-"  # sessions created for POST /v1/memories with infer: true
ACTOR = "extractor"
MAX_ALIASES = 20  # earlier wordings of a merged memory kept for exact-hash dedup


class Embed(Protocol):
    async def __call__(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray: ...


@dataclass
class Outcome:
    """What one ``process_session`` call did (for tests, logs and the deployment's answer)."""

    turns_extracted: int = 0
    saved: int = 0
    merged: int = 0
    skipped: int = 0
    facts: dict[str, int] = field(default_factory=dict)
    summaries: int = 0
    junk_dropped: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def merge(self, other: Outcome) -> Outcome:
        """Both runs' work (a scheduler re-run adds to what the first run did)."""
        facts = dict(self.facts)
        for k, v in other.facts.items():
            facts[k] = facts.get(k, 0) + v
        return Outcome(
            turns_extracted=self.turns_extracted + other.turns_extracted,
            saved=self.saved + other.saved,
            merged=self.merged + other.merged,
            skipped=self.skipped + other.skipped,
            facts=facts,
            summaries=self.summaries + other.summaries,
            junk_dropped=self.junk_dropped + other.junk_dropped,
            error=other.error,
        )


class ExtractionPipeline:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        embed: Embed,
        llm: LLMClient | None,
        settings: Settings,
        metrics: ExtractionMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.embed = embed
        self.llm = llm
        self.turns = TurnStore(pool)
        self.facts = FactStore(pool)
        self.store = MemoryStore(pool, model_slug)
        self.index = MemoryIndex(pool, model_slug)
        self.metrics = metrics or ExtractionMetrics()

    @property
    def enabled(self) -> bool:
        return self.llm is not None

    # ---------- entry points ----------

    async def process_session(self, key: SessionKey, *, force: bool = False) -> Outcome:
        """Extract every pending turn of the session, then summarise old turns if due."""
        out = Outcome()
        ended = force or await self.turns.is_ended(key)
        s = self.settings
        while True:
            rows = await self.turns.claim_pending(key, s.extract.max_turns, s.extract.lease_s)
            if not rows:
                break
            if not self.enabled:
                await self._store_raw(key, rows, out)
                continue
            if not await self._extract_batch(key, rows, out):
                return out  # turns stay queued; the scan retries them later
        if self.enabled and not key.session_id.startswith(INFER_PREFIX):
            await self._maybe_compress(key, ended, out)
        return out

    async def scan(self) -> list[SessionKey]:
        """Sessions due for extraction in the durable queue (and purge expired turns)."""
        try:
            await self.turns.purge_expired()
        except Exception:  # housekeeping must not stop the scan
            log.exception("purging expired turns failed")
        return await self.turns.due_sessions(
            self.settings.extract.every_n_turns, self.settings.extract.idle_s
        )

    # ---------- extraction ----------

    async def _extract_batch(self, key: SessionKey, rows: list[dict], out: Outcome) -> bool:
        ids = [r["id"] for r in rows]
        owner = key.owner
        raw = [Turn(r["role"], r["content"], r["turn_index"]) for r in rows]
        cleaned = clean_turns(raw)
        cleaned, dropped = await self._drop_restatements(owner, cleaned)
        out.junk_dropped += dropped + sum(
            1 for t in raw if t.role == "system" or CONTEXT_OPEN in t.content
        )
        if not any(t.role == "user" for t in cleaned):
            await self.turns.mark_extracted(ids)
            out.turns_extracted += len(ids)
            return True
        assert self.llm is not None
        self.metrics.attempt()
        started = time.perf_counter()
        try:
            answer = await self.llm.complete_json(EXTRACT_SYSTEM, extraction_user_prompt(cleaned))
            parsed = parse_extraction(answer)
        except LLMUnavailable as exc:
            self.metrics.error(exc.kind)
            await self.turns.release(ids)
            out.error = exc.kind
            log.warning("extraction of %s postponed: %s", key, exc)
            return False
        except BadOutput as exc:
            self.metrics.error("bad_output")
            attempts = await self.turns.release(ids, failed_attempt=True)
            out.error = "bad_output"
            if attempts >= self.settings.extract.max_attempts:
                await self.turns.mark_extracted(ids, error=f"bad_output: {exc}")
                log.error("extraction of %s dead-lettered after %d bad answers", key, attempts)
            else:
                log.warning("extraction of %s: unusable answer (%s), will retry", key, exc)
            return False
        meta = rows[0].get("meta") or {}
        await self._save_memories(key, rows, parsed.memories, meta, out)
        session_id = self._memory_session(key, meta)
        for fact in parsed.facts:
            if fact.confidence < self.settings.extract.min_confidence:
                outcome = "below_threshold"
            else:
                outcome = await self.facts.upsert(
                    owner, fact.category, fact.key, fact.value, fact.confidence,
                    session_id=session_id,
                )  # fmt: skip
            out.facts[outcome] = out.facts.get(outcome, 0) + 1
            self.metrics.fact(outcome)
        await self.turns.mark_extracted(ids)
        out.turns_extracted += len(ids)
        self.metrics.success((time.perf_counter() - started) * 1000)
        return True

    @staticmethod
    def _memory_session(key: SessionKey, meta: dict[str, Any]) -> str | None:
        if key.session_id.startswith(INFER_PREFIX):
            return meta.get("session_id")
        return key.session_id

    async def _save_memories(
        self,
        key: SessionKey,
        rows: list[dict],
        memories: list[ExtractedMemory],
        meta: dict[str, Any],
        out: Outcome,
    ) -> None:
        s = self.settings
        keep: list[ExtractedMemory] = []
        seen: set[str] = set()
        for m in memories:
            h = dedupe_hash(m.content)
            low = m.confidence < s.extract.min_confidence or m.importance < s.extract.min_importance
            if low or h in seen:
                out.skipped += 1
                self.metrics.memory("skipped")
            else:
                seen.add(h)
                keep.append(m)
        if not keep:
            return
        owner = key.owner
        vectors = await self.embed([m.content for m in keep], is_query=False)
        agent_id = next((r["agent_id"] for r in rows if r["agent_id"]), None)
        session_id = self._memory_session(key, meta)
        turn_range = [rows[0]["turn_index"], rows[-1]["turn_index"]]
        for m, vector in zip(keep, vectors, strict=True):
            if await self.index.by_hash(owner, m.content) is not None:
                out.skipped += 1
                self.metrics.memory("skipped")
                continue
            [best] = await self.index.nearest(owner, vector, 1) or [None]
            if best is not None and best.similarity >= s.extract.merge_similarity:
                # Recency wins the wording; earlier wordings stay recognisable as aliases.
                aliases = [*best.data.get("aliases", []), dedupe_hash(best.content)]
                changes = {
                    "content": m.content,
                    "data": {**best.data, "aliases": list(dict.fromkeys(aliases))[-MAX_ALIASES:]},
                    "importance": max(best.importance, m.importance),
                    "confidence": max(best.confidence, m.confidence),
                    "tags": list(dict.fromkeys([*best.tags, *m.tags])),
                }
                await self.store.update(owner, best.id, changes, vector, actor=ACTOR, event="MERGE")
                out.merged += 1
                self.metrics.memory("merged")
                continue
            tags = list(dict.fromkeys([*m.tags, *(meta.get("tags") or [])]))
            item = NewMemory(
                content=m.content,
                type=m.type,
                scope="user",
                agent_id=agent_id,
                session_id=session_id,
                tags=tags,
                metadata={
                    **(meta.get("metadata") or {}),
                    "extracted_from": {"session_id": key.session_id, "turns": turn_range},
                },
                importance=m.importance,
                confidence=m.confidence,
                source="extraction",
            )
            await self.store.add(owner, [item], vector[None, :], actor=ACTOR)
            out.saved += 1
            self.metrics.memory("saved")

    async def _drop_restatements(self, owner: Owner, turns: list[Turn]) -> tuple[list[Turn], int]:
        """Remove assistant sentences that restate memories the user already has."""
        pieces = [(i, sentences(t.content)) for i, t in enumerate(turns) if t.role == "assistant"]
        if not pieces:
            return turns, 0
        known = await self.index.recent_contents(owner)
        flat = [s for _, ss in pieces for s in ss]
        if not flat or not known:
            return turns, 0
        vectors = await self.embed(flat, is_query=False)
        threshold = self.settings.extract.restatement_similarity
        junk: set[str] = set()
        for sentence, vector in zip(flat, vectors, strict=True):
            if contained(sentence, known):
                junk.add(sentence)
                continue
            near = await self.index.nearest(owner, vector, 1)
            if near and near[0].similarity >= threshold:
                junk.add(sentence)
        if not junk:
            return turns, 0
        out = list(turns)
        for i, ss in pieces:
            kept = [s for s in ss if s not in junk]
            out[i] = Turn(turns[i].role, " ".join(kept), turns[i].turn_index)
        return [t for t in out if t.content], len(junk)

    # ---------- no LLM: raw turns become searchable episodic memories ----------

    async def _store_raw(self, key: SessionKey, rows: list[dict], out: Outcome) -> None:
        owner = key.owner
        user_turns = [
            (r, t)
            for r in rows
            for t in clean_turns([Turn(r["role"], r["content"], r["turn_index"])])
            if t.role == "user"
        ]
        fresh: list[tuple[dict, Turn]] = []
        hashes: set[str] = set()
        for r, t in user_turns:
            h = dedupe_hash(t.content)
            if h in hashes or await self.index.by_hash(owner, t.content) is not None:
                out.skipped += 1
                continue
            hashes.add(h)
            fresh.append((r, t))
        if fresh:
            vectors = await self.embed([t.content for _, t in fresh], is_query=False)
            items = [
                NewMemory(
                    content=t.content,
                    type="episodic",
                    scope="session",
                    agent_id=r["agent_id"],
                    session_id=key.session_id,
                    metadata={"session_id": key.session_id, "turn_index": t.turn_index},
                    importance=0.3,
                    source="turn",
                )
                for r, t in fresh
            ]
            await self.store.add(owner, items, vectors, actor=ACTOR)
            out.saved += len(items)
            self.metrics.memory("raw_turn", len(items))
        await self.turns.mark_extracted([r["id"] for r in rows])
        out.turns_extracted += len(rows)

    # ---------- episodic compression ----------

    async def _maybe_compress(self, key: SessionKey, ended: bool, out: Outcome) -> None:
        s = self.settings
        rows = await self.turns.uncompressed(key)
        done = []
        for r in rows:  # only turns extraction has seen, in order
            if r["extracted_at"] is None:
                break
            done.append(r)
        if ended:
            batch = done if len(done) >= 2 else []
        elif len(rows) >= s.extract.compress_every_m_turns:
            batch = done[: max(0, len(rows) - s.extract.compress_keep_window)]
        else:
            batch = []
        if not batch:
            return
        turns = clean_turns([Turn(r["role"], r["content"], r["turn_index"]) for r in batch])
        ids = [r["id"] for r in batch]
        if not turns:
            await self.turns.mark_compressed(ids)
            return
        assert self.llm is not None
        try:
            answer = await self.llm.complete_json(SUMMARY_SYSTEM, summary_user_prompt(turns))
            summary = parse_summary(answer)
        except LLMUnavailable as exc:
            self.metrics.error(exc.kind)
            out.error = exc.kind
            return
        except BadOutput:
            self.metrics.error("bad_summary")
            out.error = "bad_summary"
            return
        first, last = batch[0]["turn_index"], batch[-1]["turn_index"]
        owner = key.owner
        if await self.index.by_hash(owner, summary) is None:
            vectors = await self.embed([summary], is_query=False)
            item = NewMemory(
                content=summary,
                type="episodic",
                scope="user",
                agent_id=next((r.get("agent_id") for r in batch if r.get("agent_id")), None),
                session_id=key.session_id,
                metadata={"session_id": key.session_id, "turn_start": first, "turn_end": last},
                importance=0.5,
                source="summary",
            )
            await self.store.add(owner, [item], vectors, actor=ACTOR)
            out.summaries += 1
            self.metrics.memory("summary")
        await self.turns.mark_compressed(ids)
