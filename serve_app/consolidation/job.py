"""One consolidation run for one user: merge, reflect, digest, decay.

- merge: near-duplicates written over time (cosine >= ``merge_similarity``, same
  type) become one memory: the newest wording survives with the highest
  importance, all tags, the others' texts as aliases and ``merged_from``; the
  others are archived with a MERGE history event (``merged_into``).
- reflect (LLM): clusters of related memories yield an ``insight`` memory that keeps
  its sources' ids; a cluster is reflected on once (``cluster_key``).
- digest (LLM): old episodic memories are summarised into one episodic memory
  (``sources``); the originals are archived (``summarised_into``).
- decay: old memories never retrieved lose importance, once per period.

Bounded per run (memories loaded, LLM calls, decays), idempotent (a second run over
unchanged memories changes nothing), one run per user at a time across replicas (a
lease row, :mod:`serve_app.consolidation.lease`: no connection or transaction is held
across LLM calls, and a crashed replica's lease runs out); without an LLM only merge
and decay run. Every write checks the row version it read, so a concurrent PATCH wins
over consolidation, and runs in a short transaction that renews the lease, so a run
that lost its lease writes nothing. Memory writes go through the
:class:`GuardedWriter` as erasure-guarded work begun when the run read the memories:
a forget of the owner that runs or finishes after that voids them (nothing built from
deleted memories is inserted), and quotas and validation hold as for any producer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from pydantic import ValidationError as AnswerInvalid

from serve_app.consolidation.lease import Lease, LeaseLost
from serve_app.consolidation.pairs import groups, near_pairs, unit_vectors
from serve_app.consolidation.prompts import (
    DIGEST_SYSTEM,
    INSIGHT_SCHEMA,
    INSIGHT_SYSTEM,
    InsightAnswer,
    memories_prompt,
)
from serve_app.consolidation.store import ConsolidationStore
from serve_app.extraction.parser import SUMMARY_SCHEMA, BadOutput, SummaryAnswer, load_json_object
from serve_app.llm.answer_schema import ResponseSchema
from serve_app.llm.client import LLMClient, LLMUnavailable
from serve_app.metrics import ConsolidationMetrics
from serve_app.settings import ConsolidateSettings, Settings
from serve_app.spend.meter import SpendMeter
from serve_app.store import NewMemory, Owner, erasure
from serve_app.store.guarded import GuardedWriter, ValidationError
from serve_app.store.llm_spend import CallTag, OverBudget
from serve_app.store.memory_index import VersionConflict
from serve_app.store.quota import QuotaExceeded
from serve_app.text import dedupe_hash

log = logging.getLogger(__name__)
ACTOR = "consolidation"
Embed = Callable[..., Awaitable[np.ndarray]]
Answer = TypeVar("Answer", bound=BaseModel)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


class Consolidator:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        embed: Embed,
        llm: LLMClient | None,
        settings: ConsolidateSettings,
        metrics: ConsolidationMetrics | None = None,
        *,
        writer: GuardedWriter | None = None,
    ) -> None:
        """``writer``: the replica's (quotas); None: one without quotas (tests)."""
        self.pool = pool
        self.db = ConsolidationStore(pool, model_slug)
        self.memories = writer or GuardedWriter(pool, model_slug)
        self.embed = embed
        self.llm = llm
        self.s = settings
        self.metrics = metrics or ConsolidationMetrics()

    async def run(self, owner: Owner) -> dict[str, Any]:
        """Consolidate one user; returns what happened (also kept in consolidation_state)."""
        started = time.perf_counter()
        report: dict[str, Any] = {
            "merged": 0,
            "archived": 0,
            "insights": 0,
            "digests": 0,
            "decayed": 0,
            "conflicts": 0,
            "llm_errors": 0,
        }
        lease = await Lease.claim(self.pool, owner, self.s.lease_s)
        if lease is None:
            self.metrics.outcome("busy")
            return {**report, "skipped": "another run in progress"}
        try:
            await self._begin_work(owner)
            await self._steps(owner, lease, report, started)
            report["ms"] = _ms(started)
            async with lease.hold() as conn:
                await self.db.record_run(owner, report, conn)
        except LeaseLost as exc:  # ran past its lease and another run took over
            log.warning("%s", exc)
            self.metrics.outcome("lease_lost")
            return {**report, "skipped": "lease lost to another run"}
        finally:
            erasure.end_work()
            await lease.release()
        for outcome in ("merged", "archived", "insights", "digests", "decayed", "conflicts"):
            self.metrics.outcome(outcome, report[outcome])
        self.metrics.run(report["ms"])
        return report

    async def _begin_work(self, owner: Owner) -> None:
        """Mark this task as work on the owner's memories from now (database clock), before
        they are read: a forget of the owner after this voids every write of the run."""
        async with self.pool.connection() as conn:
            now = (await (await conn.execute("SELECT now() AS t")).fetchone())["t"]
        erasure.begin_work(owner.tenant_id, owner.user_id or "", "", now)

    async def _steps(
        self, owner: Owner, lease: Lease, report: dict[str, Any], started: float
    ) -> None:
        """Load, merge, the LLM steps, decay; each DB step on a short pool checkout."""
        rows = await self.db.load(owner, self.s.max_memories)
        report["memories"] = len(rows)
        steps = report["steps_ms"] = {"load": _ms(started)}
        t = time.perf_counter()
        alive = await self._merge(owner, lease, rows, report)
        steps["merge"], t = _ms(t), time.perf_counter()
        if self.llm is not None:
            await self._reflect(owner, lease, alive, report)
            await self._digest(owner, lease, alive, report)
        steps["llm_steps"], t = _ms(t), time.perf_counter()
        async with lease.hold() as conn:
            report["decayed"] = await self.db.decay(
                owner,
                age_days=self.s.decay_age_days,
                factor=self.s.decay_factor,
                floor=self.s.decay_floor,
                limit=self.s.max_decay,
                conn=conn,
            )
        steps["decay"] = _ms(t)

    # ---------- merge ----------

    async def _merge(
        self, owner: Owner, lease: Lease, rows: list[dict[str, Any]], report: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Merge near-duplicate groups; returns the rows still active afterwards."""
        if len(rows) < 2:
            return rows
        gone: set[int] = set()
        for group in await asyncio.to_thread(self._merge_groups, rows):  # CPU: off the loop
            members = sorted(group, key=lambda i: rows[i]["created_at"], reverse=True)
            members = members[: self.s.max_merge_group]  # the rest: the next run
            keep, others = rows[members[0]], [rows[i] for i in members[1:]]
            if await self._merge_group(owner, lease, keep, others, report):
                gone.update(members[1:])
        return [r for i, r in enumerate(rows) if i not in gone]

    def _merge_groups(self, rows: list[dict[str, Any]]) -> list[list[int]]:
        """Groups of near-duplicates of one type (runs in a worker thread)."""
        vectors = np.stack([np.asarray(r["embedding"], dtype=np.float32) for r in rows])
        pairs = near_pairs(vectors, self.s.merge_similarity, self.s.max_neighbours)
        return groups(len(rows), [(a, b) for a, b in pairs if rows[a]["type"] == rows[b]["type"]])

    async def _merge_group(
        self,
        owner: Owner,
        lease: Lease,
        keep: dict[str, Any],
        others: list[dict[str, Any]],
        report: dict,
    ) -> bool:
        data = dict(keep["data"] or {})
        aliases = [*data.get("aliases", []), *(dedupe_hash(o["content"]) for o in others)]
        for o in others:
            aliases += (o["data"] or {}).get("aliases", [])
        data["aliases"] = list(dict.fromkeys(aliases))[-50:]
        data["merged_from"] = [*data.get("merged_from", []), *(str(o["id"]) for o in others)]
        changes = {
            "importance": max(r["importance"] for r in [keep, *others]),
            "confidence": max(r["confidence"] for r in [keep, *others]),
            "tags": list(dict.fromkeys(t for r in [keep, *others] for t in r["tags"])),
            "data": data,
        }
        try:  # the survivor's MERGE and the others' archiving commit together
            async with lease.hold() as conn:
                merged = await self.memories.update(
                    owner,
                    keep["id"],
                    changes,
                    None,
                    actor=ACTOR,
                    event="MERGE",
                    expected_version=keep["version"],
                    conn=conn,
                )
                if merged is None:  # gone meanwhile, or voided by a forget
                    raise VersionConflict(keep["version"])
                n = await self.db.archive(
                    owner,
                    {o["id"]: o["version"] for o in others},
                    keep["id"],
                    "merged_into",
                    conn,
                )
        except VersionConflict:
            report["conflicts"] += 1
            return False
        report["merged"] += 1
        report["archived"] += n
        return True

    # ---------- reflect (LLM) ----------

    async def _reflect(
        self, owner: Owner, lease: Lease, rows: list[dict[str, Any]], report: dict
    ) -> None:
        pool = [r for r in rows if r["type"] not in ("insight", "episodic")]
        if len(pool) < self.s.min_cluster:
            return
        known = await self.db.insight_keys(owner)
        vectors, neighbours = await asyncio.to_thread(self._neighbours, pool)  # CPU: off the loop
        order = sorted(neighbours, key=lambda i: -pool[i]["importance"])
        used: set[int] = set()
        calls = 0
        for seed in order:
            if calls >= self.s.max_insights or seed in used:
                continue
            near = [i for i in neighbours[seed] if i not in used]
            near.sort(key=lambda i: -float(vectors[i] @ vectors[seed]))
            cluster = [seed, *near][: self.s.max_cluster]
            if len(cluster) < self.s.min_cluster:
                continue
            used.update(cluster)
            members = [pool[i] for i in cluster]
            ids = sorted(str(m["id"]) for m in members)
            key = hashlib.sha256(",".join(ids).encode()).hexdigest()[:32]
            if key in known:
                continue
            calls += 1
            contents = [m["content"] for m in members]
            answer = await self._ask(
                lease, INSIGHT_SYSTEM, contents, report, INSIGHT_SCHEMA, InsightAnswer
            )
            if answer is None or not answer.insight:
                continue
            text = answer.insight
            item = NewMemory(
                content=text,
                type="insight",
                importance=answer.importance,
                data={"sources": ids, "cluster_key": key},
                source=ACTOR,
            )
            vectors = await self.embed([text], is_query=False)
            async with lease.hold() as conn:
                added = await self._add(owner, item, vectors, conn, report)
            report["insights"] += bool(added)

    def _neighbours(self, pool: list[dict[str, Any]]) -> tuple[np.ndarray, dict[int, list[int]]]:
        """Unit vectors and each memory's related ones (runs in a worker thread)."""
        stacked = np.stack([np.asarray(r["embedding"], dtype=np.float32) for r in pool])
        vectors = unit_vectors(stacked)
        k = max(self.s.max_neighbours, self.s.max_cluster)
        neighbours: dict[int, list[int]] = {}
        for a, b in near_pairs(vectors, self.s.cluster_similarity, k):  # one blocked pass
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
        return vectors, neighbours

    # ---------- digest (LLM) ----------

    async def _digest(
        self, owner: Owner, lease: Lease, rows: list[dict[str, Any]], report: dict
    ) -> None:
        cutoff = time.time() - self.s.episodic_age_days * 86400
        old = sorted(
            (
                r
                for r in rows
                if r["type"] == "episodic"
                and r["source"] != ACTOR
                and r["created_at"].timestamp() < cutoff
            ),
            key=lambda r: r["created_at"],
        )
        for n in range(self.s.max_digests):
            batch = old[n * self.s.digest_batch : (n + 1) * self.s.digest_batch]
            if len(batch) < 2:
                return
            contents = [r["content"] for r in batch]
            answer = await self._ask(
                lease, DIGEST_SYSTEM, contents, report, SUMMARY_SCHEMA, SummaryAnswer
            )
            if answer is None or not answer.summary:
                continue
            summary = answer.summary
            ids = [str(r["id"]) for r in batch]
            item = NewMemory(
                content=summary,
                type="episodic",
                importance=0.5,
                source=ACTOR,
                data={"sources": ids},
            )
            vectors = await self.embed([summary], is_query=False)
            async with lease.hold() as conn:  # the digest and its sources' archiving: together
                added = await self._add(owner, item, vectors, conn, report)
                if not added:
                    continue
                await self.db.archive(
                    owner,
                    {r["id"]: r["version"] for r in batch},
                    added[0]["id"],
                    "summarised_into",
                    conn,
                )
            report["digests"] += 1

    async def _add(
        self, owner: Owner, item: NewMemory, vectors: np.ndarray, conn: Any, report: dict
    ) -> list[dict[str, Any]]:
        """One new memory through the writer; ``[]`` (counted) when refused: a forget
        voided the run, a quota is full or the LLM's text is unusable."""
        try:
            added = await self.memories.add(owner, [item], vectors, actor=ACTOR, conn=conn)
        except (QuotaExceeded, ValidationError) as exc:
            log.warning("consolidation of %s: %s", owner, exc)
            added = []
        if not added:
            report["refused"] = report.get("refused", 0) + 1
            self.metrics.outcome("refused")
        return added

    async def _ask(
        self,
        lease: Lease,
        system: str,
        contents: Sequence[str],
        report: dict,
        schema: ResponseSchema,
        model: type[Answer],
    ) -> Answer | None:
        """One LLM call, holding no connection, its answer validated by ``model`` (whose
        strict schema is ``schema``); the lease is renewed first so it covers the call
        (``lease_s`` must exceed the LLM's timeout times its attempts)."""
        assert self.llm is not None
        await lease.renew()
        tag = CallTag(lease.owner.tenant_id, lease.owner.user_id, "consolidate")
        response_format = self.llm.answer_format(schema)
        try:
            answer = await self.llm.complete_json(
                system, memories_prompt(contents), tag=tag, schema=schema
            )
            return model.model_validate(load_json_object(answer))
        except OverBudget as exc:  # the LLM steps wait for the budget; nothing is lost
            report["deferred"] = exc.resumes_at.isoformat()
            self.metrics.outcome("deferred_budget")
            return None
        except (BadOutput, AnswerInvalid) as exc:
            self.metrics.schema_failure(response_format)
            report["llm_errors"] += 1
            self.metrics.outcome("llm_error")
            log.warning("consolidation LLM answer broke its contract: %s", exc)
            return None
        except LLMUnavailable as exc:
            report["llm_errors"] += 1
            self.metrics.outcome("llm_error")
            log.warning("consolidation LLM call failed: %s", exc)
            return None


def consolidation_llm(settings: Settings, meter: SpendMeter | None = None) -> LLMClient | None:
    """The LLM of the insight/digest steps, or None (then only merge and decay run)."""
    return LLMClient(settings.llm, meter=meter) if settings.llm.base_url else None


async def run_due(consolidator: Consolidator, min_interval_s: float, limit: int) -> int:
    """One tick of the periodic job: consolidate the users that are due; how many ran."""
    n = 0
    for owner in await consolidator.db.due_users(min_interval_s, limit):
        try:
            n += "skipped" not in await consolidator.run(owner)
        except (psycopg.Error, LLMUnavailable):
            log.exception("consolidation of %s failed", owner)
    return n


__all__ = ["Consolidator", "consolidation_llm", "groups", "near_pairs", "run_due"]
