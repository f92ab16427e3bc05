"""Episodic compression: a session's older extracted turns become one summary memory.

Split out of the pipeline (one job per module): every ``compress_every_m_turns`` turns,
and on session end, the turns extraction has seen (in order, never a dead letter) are
summarised by the LLM into an ``episodic`` memory, written through the pipeline's
:class:`MemoryWriter` (exact-text dedup, the guarded write path).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np

from serve_app.extraction.junk import clean_turns
from serve_app.extraction.outcome import Outcome
from serve_app.extraction.parser import SUMMARY_SCHEMA, BadOutput, parse_summary
from serve_app.extraction.prompts import SUMMARY_SYSTEM, summary_user_prompt
from serve_app.extraction.speakers import Speakers
from serve_app.extraction.turn import turn_of
from serve_app.extraction.writer import MemoryWriter
from serve_app.llm.client import LLMClient, LLMUnavailable
from serve_app.metrics import ExtractionMetrics
from serve_app.settings import Settings
from serve_app.store import NewMemory
from serve_app.store.llm_spend import CallTag, OverBudget
from serve_app.store.memory_index import MemoryIndex
from serve_app.store.turns import SessionKey, TurnStore

Embed = Callable[..., Awaitable[np.ndarray]]


class Compressor:
    def __init__(
        self,
        turns: TurnStore,
        index: MemoryIndex,
        writer: MemoryWriter,
        embed: Embed,
        llm: LLMClient | None,
        settings: Settings,
        metrics: ExtractionMetrics,
    ) -> None:
        self.turns = turns
        self.index = index
        self.writer = writer
        self.embed = embed
        self.llm = llm
        self.settings = settings
        self.metrics = metrics

    async def maybe_compress(self, key: SessionKey, ended: bool, out: Outcome) -> None:
        s = self.settings
        rows = await self.turns.uncompressed(key)
        done = []
        for r in rows:  # only turns extraction has seen, in order; never a dead letter
            if r["extracted_at"] is None or r["dead_at"] is not None:
                break  # (its content was refused: summarising it would be refused too)
            done.append(r)
        if ended:
            batch = done if len(done) >= 2 else []
        elif len(rows) >= s.extract.compress_every_m_turns:
            batch = done[: max(0, len(rows) - s.extract.compress_keep_window)]
        else:
            batch = []
        if not batch:
            return
        turns = clean_turns([turn_of(r) for r in batch])
        ids = [r["id"] for r in batch]
        if not turns:
            await self.turns.mark_compressed(ids)
            return
        assert self.llm is not None
        response_format = self.llm.answer_format(SUMMARY_SCHEMA)
        try:
            answer = await self.llm.complete_json(
                SUMMARY_SYSTEM,
                summary_user_prompt(turns, Speakers.of(turns, key.owner)),
                tag=CallTag(key.tenant_id, key.user_id, "summarize"),
                schema=SUMMARY_SCHEMA,
            )
            summary = parse_summary(answer)
        except OverBudget as exc:  # the turns stay unsummarised until the budget allows
            out.deferred = exc.resumes_at.isoformat()
            return
        except LLMUnavailable as exc:
            self.metrics.error(exc.kind)
            out.error = exc.kind
            return
        except BadOutput:
            self.metrics.schema_failure("summarize", response_format)
            self.metrics.error("bad_summary")
            out.error = "bad_summary"
            # Given up (counted): an ended session with turns left to summarise is due
            # again at every scan (TurnStore.due_sessions), and the same answer would
            # come back each time. Their memories were extracted already.
            await self.turns.mark_compressed(ids)
            return
        first, last = batch[0]["turn_index"], batch[-1]["turn_index"]
        if await self.index.by_hash(key.owner, summary) is None:
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
                valid_from=turns[0].occurred_at,
            )
            if await self.writer.add_unique(key.owner, [item], vectors):
                out.summaries += 1
                self.metrics.memory("summary")
        await self.turns.mark_compressed(ids)
