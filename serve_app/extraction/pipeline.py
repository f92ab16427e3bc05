"""Extraction pipeline, independent of Ray: pending turns -> LLM -> dedup/conflicts -> store.

``deployments/extractor.py`` wraps one :class:`ExtractionPipeline` per replica;
tests build it with a real database, the local encoder and the fake LLM.

Failure policy: an unreachable LLM (connection refused, 5xx, 429, breaker open)
releases the claimed turns untouched so a later trigger or the periodic scan
extracts them. Anything that may be the batch's own fault counts an attempt: a 4xx
refusal, a timeout, an unusable answer (one nested too deep included), a database
error while saving, any unforeseen error (``internal``: never re-sent for ever). A counted
failure backs off (``retry_backoff_s``, doubling) and after ``max_attempts`` the
batch is dead-lettered: kept, counted as failed in the session status, listed and
retried by the admin API. Over a background token budget nothing is claimed (spend/).
Prompts are capped by tokens (long batches split, long turns truncated), so "context
too long" does not happen by construction. Claims carry a token: a run whose claim
expired and was taken over changes nothing.
Nothing here raises into the chat path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from serve_app.extraction.decisions import Provenance
from serve_app.extraction.episodes import Compressor
from serve_app.extraction.grounding import Limits as GroundLimits
from serve_app.extraction.grounding import grounded
from serve_app.extraction.guidance import GuidanceFor, for_request, from_env, guidance_prompt
from serve_app.extraction.junk import clean_turns, substantive
from serve_app.extraction.negation import without_negated
from serve_app.extraction.outcome import Outcome
from serve_app.extraction.parser import (
    BadOutput,
    ExtractedFact,
    ExtractedMemory,
    extraction_schema,
    parse_extraction,
)
from serve_app.extraction.prompts import (
    EXTRACT_SYSTEM,
    answer_tokens,
    chunk_turns,
    extraction_user_prompt,
)
from serve_app.extraction.raw_turns import raw_turn_memories
from serve_app.extraction.reconcile import Known, Reconciler, prompt_parts
from serve_app.extraction.restatements import Embed, drop_restatements
from serve_app.extraction.speakers import SPEAKER_RULES, Speakers
from serve_app.extraction.turn import Turn, said_at, turn_of
from serve_app.extraction.writer import ACTOR, MemoryWriter
from serve_app.llm.client import LLMClient, LLMUnavailable
from serve_app.metrics import ExtractionMetrics
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter, ValidationError
from serve_app.store.llm_spend import CallTag, OverBudget
from serve_app.store.memory_index import MemoryIndex
from serve_app.store.quota import QuotaExceeded
from serve_app.store.turns import INFER_PREFIX, SessionKey, TurnStore
from serve_app.tenancy import ExtractionGuidance
from serve_app.text import CONTEXT_OPEN, count_tokens, dedupe_hash

log = logging.getLogger(__name__)
__all__ = ["ACTOR", "INFER_PREFIX", "ExtractionPipeline", "Outcome"]
# Failures that may be the batch's own fault (count an attempt, then dead-letter).
COUNTED = frozenset({"http_4xx", "timeout", "bad_output", "db_error"})


class ExtractionPipeline:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        embed: Embed,
        llm: LLMClient | None,
        settings: Settings,
        metrics: ExtractionMetrics | None = None,
        guidance: GuidanceFor | None = None,
        writer: GuardedWriter | None = None,
    ) -> None:
        self.settings = settings
        # The tenant's guidance for the prompt (the extractor reads its settings), else the env's.
        self.guidance = guidance or from_env(settings)
        self.embed = embed
        self.llm = llm
        self.turns = TurnStore(pool)
        # Every memory and fact write: erasure guard, quotas, validation, history.
        self.guarded = writer or GuardedWriter.from_settings(pool, model_slug, settings)
        self.store, self.facts = self.guarded.memories, self.guarded.facts  # reads
        self.index = MemoryIndex(pool, model_slug)
        self.metrics = metrics or ExtractionMetrics()
        self.pool = pool
        self.reconciler = Reconciler(pool, model_slug, self.index, embed, settings)
        self.writer = MemoryWriter(
            pool, self.guarded, self.index, settings.extract.merge_similarity, self.metrics
        )
        self.ground_limits = GroundLimits.from_settings(settings.extract)
        self.compressor = Compressor(
            self.turns, self.index, self.writer, embed, llm, settings, self.metrics
        )
        self.meter = llm.meter if llm is not None else None

    @property
    def enabled(self) -> bool:
        return self.llm is not None

    # ---------- entry points ----------

    async def process_session(self, key: SessionKey, *, force: bool = False) -> Outcome:
        """Extract every pending turn of the session, then summarise old turns if due."""
        out = Outcome()
        ended = force or await self.turns.is_ended(key)
        s = self.settings
        over = self.meter and await self.meter.deferred(key.tenant_id, key.user_id)
        if over:  # nothing claimed: the turns wait in the queue for the next scan
            return self._defer(key, over, out)
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
            await self.compressor.maybe_compress(key, ended, out)
        return out

    def _defer(self, key: SessionKey, over: OverBudget, out: Outcome) -> Outcome:
        out.deferred = over.resumes_at.isoformat()
        self.metrics.error("deferred_budget")
        log.info("extraction of %s deferred: %s", key, over)
        return out

    async def scan(self) -> list[SessionKey]:
        """Sessions due for extraction in the durable queue (and purge expired turns)."""
        try:
            await self.turns.purge_expired()
        except Exception:  # housekeeping must not stop the scan
            log.exception("purging expired turns failed")
        s = self.settings.extract
        return await self.turns.due_sessions(
            s.every_n_turns, s.idle_s, per_user=s.scan_per_user, summaries=self.enabled
        )

    # ---------- extraction ----------

    async def _extract_batch(self, key: SessionKey, rows: list[dict], out: Outcome) -> bool:
        ids = [r["id"] for r in rows]
        claim = rows[0].get("claim_token")
        started = time.perf_counter()
        try:
            cleaned = await self._cleaned(key, rows, out)
            if not any(t.role == "user" and substantive(t.content) for t in cleaned):
                out.turns_extracted += await self.turns.mark_extracted(ids, claim=claim)
                return True
            known = await self.reconciler.known(key.owner, cleaned)
            meta = rows[0].get("meta") or {}
            guidance = for_request(await self.guidance(key.tenant_id), meta)
            speakers = Speakers.of(cleaned, key.owner)
            memories, facts = await self._ask(key, cleaned, known, guidance, speakers)
            memories, facts = await self._grounded(cleaned, known, memories, facts, out)
            for owner, (mine, their_facts) in self._by_owner(speakers, memories, facts, out):
                shown = known if owner == key.owner else None
                await self._save_memories(key, rows, mine, meta, out, shown, owner)
                await self._save_facts(key, meta, their_facts, out, said_at(rows), owner)
        except OverBudget as exc:  # raised before the call: no attempt counted
            await self.turns.release(ids, claim=claim)
            self._defer(key, exc, out)
            return False
        except LLMUnavailable as exc:
            self.metrics.error(exc.kind)
            out.error = exc.kind
            if exc.kind in COUNTED:
                return await self._failed(key, rows, claim, exc.kind, str(exc))
            await self.turns.release(ids, claim=claim)
            log.warning("extraction of %s postponed: %s", key, exc)
            return False
        except BadOutput as exc:
            self.metrics.error("bad_output")
            out.error = "bad_output"
            return await self._failed(key, rows, claim, "bad_output", str(exc))
        except psycopg.Error as exc:
            self.metrics.error("db_error")
            out.error = "db_error"
            log.exception("extraction of %s: database error", key)
            return await self._failed(key, rows, claim, "db_error", type(exc).__name__)
        except Exception as exc:  # unforeseen (an answer nothing parses, a bug): counted, so
            # the batch dead-letters after max_attempts instead of re-sending it for ever
            self.metrics.error("internal")
            out.error = "internal"
            log.exception("extraction of %s: unexpected error", key)
            return await self._failed(key, rows, claim, "internal", type(exc).__name__)
        done = await self.turns.mark_extracted(ids, claim=claim)
        if done < len(ids):  # our claim ran out and another run took over: its turns
            log.warning(
                "claim on %s expired mid-run; %d turns left to its new holder", key, len(ids) - done
            )
        out.turns_extracted += done
        self.metrics.success((time.perf_counter() - started) * 1000)
        return True

    def _by_owner(
        self,
        speakers: Speakers,
        memories: list[ExtractedMemory],
        facts: list[ExtractedFact],
        out: Outcome,
    ) -> list[tuple[Owner, tuple[list[ExtractedMemory], list[ExtractedFact]]]]:
        """The batch's memories and facts by the owner they are about (the session's owner
        first). A decision on a row the prompt showed (the session owner's) only stands
        for the owner; for another speaker it is a new memory. What is about nobody who
        has a memory here (a third party's own statement, an alias nobody has) is
        dropped and counted as ``third_party``."""
        groups: dict[Owner, tuple[list[ExtractedMemory], list[ExtractedFact]]] = {
            speakers.owner: ([], [])
        }
        for item in [*memories, *facts]:
            owner = speakers.owner_for(item.about)
            if owner is None:
                kind = "memory" if isinstance(item, ExtractedMemory) else "fact"
                getattr(self.metrics, kind)("third_party")
                out.skipped += 1
                continue
            if owner != speakers.owner and isinstance(item, ExtractedMemory):
                if not item.content:
                    continue  # INVALIDATE/NOOP of a row shown for the owner
                item = item.model_copy(update={"event": "ADD", "target": None})
            mine, their_facts = groups.setdefault(owner, ([], []))
            (mine if isinstance(item, ExtractedMemory) else their_facts).append(item)
        return list(groups.items())

    async def _cleaned(self, key: SessionKey, rows: list[dict], out: Outcome) -> list[Turn]:
        raw = [turn_of(r) for r in rows]
        cleaned, dropped = await self._drop_restatements(key.owner, clean_turns(raw))
        out.junk_dropped += dropped + sum(
            1 for t in raw if t.role == "system" or CONTEXT_OPEN in t.content
        )
        return cleaned

    async def _ask(
        self,
        key: SessionKey,
        turns: list[Turn],
        known: Known,
        guidance: ExtractionGuidance,
        speakers: Speakers,
    ) -> tuple[list[ExtractedMemory], list[ExtractedFact]]:
        """One LLM call per token-capped chunk (each shows what the owner already has:
        serve_app/extraction/reconcile.py, and who said what when several people speak:
        serve_app/extraction/speakers.py); any failure fails the whole batch."""
        assert self.llm is not None
        s = self.settings.extract
        memories: list[ExtractedMemory] = []
        facts: list[ExtractedFact] = []
        rules, block = prompt_parts(known)
        budget = s.max_prompt_tokens - count_tokens(block)
        purpose = "infer" if key.session_id.startswith(INFER_PREFIX) else "extract"
        tag = CallTag(key.tenant_id, key.user_id, purpose)
        # What every call of a tenant shares first (contract, guidance: provider prompt
        # caches hit), then what varies (rules if something is shown, turns, known block).
        system = EXTRACT_SYSTEM + guidance_prompt(guidance) + rules
        if speakers:
            system += "\n" + SPEAKER_RULES
        schema = extraction_schema(reconcile=bool(rules), speakers=bool(speakers))
        for chunk in chunk_turns(turns, budget, s.max_turn_tokens):
            self.metrics.attempt()
            response_format = self.llm.answer_format(schema)
            answer = await self.llm.complete_json(
                system,
                extraction_user_prompt(chunk, speakers) + block,
                tag=tag,
                max_tokens=answer_tokens(self.settings, chunk, len(known.items)),
                schema=schema,
            )
            try:
                parsed = parse_extraction(answer)
            except BadOutput:
                self.metrics.schema_failure(purpose, response_format)
                raise
            if parsed.dropped:
                self.metrics.schema_failure(purpose, response_format)
            memories += [
                m.model_copy(update={"tags": guidance.pick(m.tags)}) for m in parsed.memories
            ]
            facts += parsed.facts
        return memories, facts

    async def _grounded(
        self,
        turns: list[Turn],
        known: Known,
        memories: list[ExtractedMemory],
        facts: list[ExtractedFact],
        out: Outcome,
    ) -> tuple[list[ExtractedMemory], list[ExtractedFact]]:
        """Drop and count what the model copied from the known block (grounding.py) and
        memories that say the opposite of what the user said (negation.py)."""
        if not self.settings.extract.ground:
            return memories, facts
        memories, facts, drop = await grounded(
            turns, known, memories, facts, self.embed, self.ground_limits
        )
        memories, contrary = await asyncio.to_thread(
            without_negated, turns, memories, self.ground_limits
        )
        drop = [*drop, *contrary]
        for c in drop:
            self.metrics.ungrounded(c.kind, c.reason)
            log.info("extraction dropped an ungrounded %s: %.80r", c.kind, c.value)
        out.ungrounded += len(drop)
        return memories, facts

    async def _failed(
        self, key: SessionKey, rows: list[dict], claim: Any, kind: str, message: str
    ) -> bool:
        s = self.settings.extract
        before = max(r.get("extract_attempts") or 0 for r in rows)
        attempts, dead = await self.turns.fail(
            [r["id"] for r in rows],
            claim=claim,
            error=f"{kind}: {message}",
            max_attempts=s.max_attempts,
            retry_after_s=s.retry_backoff_s * (2**before),
        )
        if dead:
            self.metrics.error("dead_lettered")
            log.error("extraction of %s dead-lettered after %d attempts (%s)", key, attempts, kind)
        else:
            log.warning("extraction of %s failed (%s), attempt %d", key, kind, attempts)
        return False

    async def _save_facts(
        self,
        key: SessionKey,
        meta: dict[str, Any],
        facts: list[ExtractedFact],
        out: Outcome,
        said: datetime | None = None,
        owner: Owner | None = None,
    ) -> None:
        """``owner``: whose facts they are (default: the session's owner)."""
        owner = owner or key.owner
        session_id = self._memory_session(key, meta)
        for fact in facts:
            if fact.confidence < self.settings.extract.min_confidence:
                outcome = "below_threshold"
            else:
                try:
                    outcome = await self.guarded.upsert_fact(
                        owner,
                        fact.category,
                        fact.key,
                        fact.value,
                        fact.confidence,
                        session_id=session_id,
                        importance=fact.importance,
                        valid_from=fact.valid_from or said,
                    )
                except QuotaExceeded:
                    outcome = "over_quota"
                except ValidationError:
                    outcome = "invalid"
            out.facts[outcome] = out.facts.get(outcome, 0) + 1
            self.metrics.fact(outcome)

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
        known: Known | None,
        owner: Owner | None = None,
    ) -> None:
        """``owner``: whose memories they are (default: the session's owner); ``known``:
        what the prompt showed of that owner's (None: nothing, every item is new)."""
        owner = owner or key.owner
        s = self.settings
        keep: list[ExtractedMemory] = []
        seen: set[str] = set()
        for m in memories:
            if not m.content:  # INVALIDATE/NOOP: a decision on a shown row, no new text
                keep.append(m)
                continue
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
        texts = [m.content for m in keep if m.content]
        embedded = iter(await self.embed(texts, is_query=False) if texts else [])
        vectors = [next(embedded) if m.content else None for m in keep]
        turn_range = [rows[0]["turn_index"], rows[-1]["turn_index"]]
        template = NewMemory(
            content="",
            scope="user",
            agent_id=next((r["agent_id"] for r in rows if r["agent_id"]), None),
            session_id=self._memory_session(key, meta),
            tags=list(meta.get("tags") or []),
            metadata={
                **(meta.get("metadata") or {}),
                "extracted_from": {"session_id": key.session_id, "turns": turn_range},
            },
            source="extraction",
            valid_from=said_at(rows),  # unless the model dates a memory itself
        )
        prov = Provenance([r["turn_index"] for r in rows], template.valid_from)
        await self.writer.save(owner, keep, vectors, template, out, known, prov)

    async def _drop_restatements(self, owner: Owner, turns: list[Turn]) -> tuple[list[Turn], int]:
        """Remove assistant sentences that restate memories the user already has."""
        threshold = self.settings.extract.restatement_similarity
        return await drop_restatements(self.index, self.embed, threshold, owner, turns)

    # ---------- no LLM: raw turns become searchable episodic memories ----------

    async def _store_raw(self, key: SessionKey, rows: list[dict], out: Outcome) -> None:
        items = raw_turn_memories(key, rows)
        added: list[NewMemory] = []
        if items:
            vectors = await self.embed([i.content for i in items], is_query=False)
            added = await self.writer.add_unique(key.owner, items, vectors)
            self.metrics.memory("raw_turn", len(added))
        out.saved += len(added)
        out.skipped += len(items) - len(added)
        claim = rows[0].get("claim_token")
        out.turns_extracted += await self.turns.mark_extracted([r["id"] for r in rows], claim=claim)
