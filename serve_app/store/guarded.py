"""The one write path for memories and facts: :class:`GuardedWriter`.

Every producer (the API's memories, batch and facts routes, mem0 and MCP through
them, import, extraction, consolidation) writes through a GuardedWriter; it runs the
write statements (:mod:`serve_app.store.memory_writes`, :mod:`serve_app.store.fact_writes`),
and nothing else does (``tests/serve_app/store/test_guarded_producers.py`` walks the
source); :class:`MemoryStore` and :class:`FactStore` only read. Each write applies, in its
own statement or transaction:

- validation (:mod:`serve_app.store.validation`, ``ValidationError``: a 422): content
  limits, NUL characters, types, scopes, finite 0..1 scores, aware datetimes;
- the erasure guard (:mod:`serve_app.store.erasure`): work begun before a forget of
  its owner (extraction, consolidation) writes nothing; an API write while a forget
  of its owner runs is refused (:class:`ForgetInProgress`, a retryable 409);
- quotas of memories and of facts, per user and per tenant (``QuotaExceeded``, 403);
- history: memory events in the write's own statement; facts keep replaced values.

The re-embed worker is exempt on purpose: it upserts vectors of existing items only
(joined to ``memory_items`` under a share lock, content re-checked by md5), so it cannot
resurrect a forgotten item, adds nothing a quota counts and stores no caller input
(``tests/serve_app/reembed/test_reembed_forget.py`` holds that).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import numpy as np
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from serve_app.settings import Settings
from serve_app.store import erasure, fact_writes, imports, quota, supersede
from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.documents import DocumentStore
from serve_app.store.facts import EXPLICIT, FactStore
from serve_app.store.forget import Scope
from serve_app.store.memories import MemoryStore
from serve_app.store.memory_index import VersionConflict, using
from serve_app.store.memory_writes import (
    BATCH_GUARD,
    add_params,
    add_statement,
    classify_statement,
    delete_statement,
    one_memory,
    update_statement,
)
from serve_app.store.profile import unclassified_statement
from serve_app.store.records import NewMemory, Owner, owner_key
from serve_app.store.validation import (
    ID_CHARS,
    ValidationError,
    check_fact,
    check_memory,
    optional_id,
    text,
    when,
)
from serve_app.store.validation import (
    field as check_field,
)
from serve_app.store.vectors import as_array, table_name
from serve_app.store.versions import CHANGES_CHANNEL
from serve_app.text import normalize

__all__ = ["ForgetInProgress", "GuardedWriter", "Quotas", "Retention", "ValidationError"]

# A tenant's (memory quota, fact quota): per-tenant overrides plug in here.
Quotas = Callable[[str], Awaitable[tuple[quota.Quota, quota.Quota]]]
# A tenant's default time to live per memory type (seconds; absent or 0: kept).
Retention = Callable[[str], Awaitable[Mapping[str, float]]]


class ProfileClasses(Protocol):
    """Gives memories their profile class. The classifier (serve_app/profile/classify.py)
    embeds and reads cues; it is passed in by whoever builds the writer, so the store
    knows no classification."""

    async def classify_many(
        self, texts: Sequence[str], types: Sequence[str], vectors: Any
    ) -> list[str | None]: ...


@dataclass(frozen=True)
class Classified:
    """One run of :meth:`GuardedWriter.classify_again`: memories examined, memories that
    joined the profile, and the cursor to pass next (None: the owner is done)."""

    examined: int
    classified: int
    next: uuid.UUID | None


class ForgetInProgress(Exception):
    """A forget of the owner is running: the write is refused, retry when it is done."""

    def __init__(self, owner: Owner) -> None:
        who = f"user {owner.user_id}" if owner.user_id else f"tenant {owner.tenant_id}"
        super().__init__(f"a forget of {who} is running; retry when it has finished")


class GuardedWriter:
    """Adds, updates and deletes memories, upserts and deletes facts, under the guards."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        *,
        memory_quota: quota.Quota | None = None,
        fact_quota: quota.Quota | None = None,
        quotas: Quotas | None = None,
        retention: Retention | None = None,
        max_chars: int = 8000,
        classifier: ProfileClasses | None = None,
    ) -> None:
        """Quotas: ``quotas`` (per tenant) when given, else the fixed ones (None: none);
        ``retention``: an add's items without an expiry get their type's (None: none);
        ``classifier``: gives written memories without one their profile class (None:
        they keep none)."""
        self.pool = pool
        self.memories = MemoryStore(pool)  # reads, for the producers that also read
        self.facts = FactStore(pool)
        self.classifier = classifier
        self.vectors = sql.Identifier(table_name(model_slug))
        gate = sql.SQL("{} AND {}").format(quota.GATE, BATCH_GUARD)
        self._add_sql = add_statement(self.vectors, gate)
        self._supersede_sql = add_statement(self.vectors, gate, supersede=True)
        self._unclassified_sql = unclassified_statement(self.vectors)
        self._classify_sql = classify_statement()
        fixed = (memory_quota or quota.Quota(), fact_quota or quota.Quota())

        async def same(_: str) -> tuple[quota.Quota, quota.Quota]:
            return fixed

        self.quotas: Quotas = quotas or same
        self.retention = retention
        self.max_chars = max_chars

    @classmethod
    def from_settings(
        cls,
        pool: AsyncConnectionPool,
        model_slug: str,
        settings: Settings,
        *,
        quotas: Quotas | None = None,
        retention: Retention | None = None,
        classifier: ProfileClasses | None = None,
    ) -> GuardedWriter:
        """The writer every producer builds: the environment's quotas, retention and
        content limit, or the tenant's (``quotas``/``retention``: its settings)."""
        q = settings.quota
        env_retention = dict(settings.lifecycle.retention_s)

        async def fixed(_: str) -> Mapping[str, float]:
            return env_retention

        return cls(
            pool,
            model_slug,
            memory_quota=quota.Quota(q.max_memories_per_user, q.max_memories_per_tenant),
            fact_quota=quota.Quota(q.max_facts_per_user, q.max_facts_per_tenant),
            quotas=quotas,
            retention=retention or (fixed if env_retention else None),
            max_chars=settings.limits.content_chars,
            classifier=classifier,
        )

    def invalid(self, item: NewMemory) -> str | None:
        """Why ``item`` may not be stored, or None (producers that skip bad items)."""
        try:
            check_memory(item, self.max_chars)
        except ValidationError as exc:
            return str(exc)
        return None

    # ---------- memories ----------

    async def add(
        self,
        owner: Owner,
        items: Sequence[NewMemory],
        embeddings: np.ndarray,
        *,
        actor: str | None = None,
        conn: AsyncConnection | None = None,
        earlier: Sequence[NewMemory] = (),
    ) -> list[dict[str, Any]]:
        """Insert all items (one statement, input order) or none.

        Inside work a forget of the owner voids it (``[]``); outside, a running forget
        raises :class:`ForgetInProgress`; over quota raises ``QuotaExceeded``. ``earlier``:
        items ``conn``'s transaction added uncounted (``quota.defer_counts``).
        """
        items = await self.prepared(owner, items)
        if not items:
            return []
        limits = (await self.quotas(owner.tenant_id))[0]
        if len(items) != len(embeddings):
            raise ValueError(f"{len(items)} items but {len(embeddings)} embeddings")
        classes = await self._classes(items, embeddings)  # once, not per try
        for _ in range(2):  # a refusal that no longer holds (counts moved): once more
            rows = await self._insert(
                owner, items, embeddings, classes, actor, limits, conn, earlier
            )
            if rows:
                return rows
            async with using(self.pool, conn) as c:
                refused = await self._blocked(c, owner, items, limits, earlier)
            if isinstance(refused, ForgetInProgress) and erasure.current() is not None:
                return []  # inside work that a forget of the owner voided
            if refused is not None:
                raise refused
        # Refused twice, each time by counts that had moved again by the check: say so.
        kind, limit = (
            ("user", limits.per_user) if limits.per_user else ("tenant", limits.per_tenant)
        )
        raise quota.QuotaExceeded(kind, limit or 0, limit or 0)

    async def _insert(
        self,
        owner: Owner,
        items: Sequence[NewMemory],
        embeddings: np.ndarray,
        classes: Sequence[str | None],
        actor: str | None,
        limits: quota.Quota,
        conn: AsyncConnection | None,
        earlier: Sequence[NewMemory],
    ) -> list[dict[str, Any]]:
        """Insert items verbatim with their vectors and ADD history: one atomic statement.

        All rows or none (quota, erasure guard: :meth:`_blocked` says why); rows come back
        in input order (``seq`` follows it); ``classes``: each item's profile class
        (:meth:`_classes`); ``conn``: the caller's transaction; ``earlier``: items it added
        uncounted (:func:`quota.params`).
        """
        params = add_params(owner, items, embeddings, classes)
        params["actor"] = actor
        params.update(quota.params(limits, owner, items, earlier))
        params.update(erasure.params(owner.user_id))
        async with using(self.pool, conn) as conn:
            retire = supersede.targets(items)  # raises SupersedeRefused on a repeated id
            params.update(supersede.params(owner, retire))
            cur = await conn.execute(self._supersede_sql if retire else self._add_sql, params)
            rows = {r["id"]: r for r in await cur.fetchall()}
            if not rows and retire:  # refused: unknown, foreign or retired targets?
                refused = await supersede.refusal(conn, owner, retire)
                if refused is not None:
                    raise refused
        out = [rows[i] for i in params["id"] if i in rows]
        for r in out:
            del r["notified"]
        return out

    async def _classes(
        self, items: Sequence[NewMemory], embeddings: np.ndarray
    ) -> list[str | None]:
        """The profile class of each item that names none (None where none applies)."""
        todo = [i for i, m in enumerate(items) if m.profile_class is None]
        classes: list[str | None] = [None] * len(items)
        if todo and self.classifier is not None:
            found = await self.classifier.classify_many(
                [items[i].content for i in todo],
                [items[i].type for i in todo],
                [embeddings[i] for i in todo],
            )
            for i, c in zip(todo, found, strict=True):
                classes[i] = c
        return classes

    async def prepared(self, owner: Owner, items: Sequence[NewMemory]) -> Sequence[NewMemory]:
        """The items as :meth:`add` stores them: validated (``item n`` names the bad one),
        supersede ids named once, retention applied. Idempotent: a caller that adds a
        batch in chunks prepares it whole first, so errors name the batch's items."""
        for n, item in enumerate(items):
            try:
                check_memory(item, self.max_chars)
            except ValidationError as exc:
                raise ValidationError(f"item {n}: {exc}" if len(items) > 1 else str(exc)) from None
        supersede.targets(items)  # raises SupersedeRefused on a repeated id
        return await self._retained(owner.tenant_id, items) if items else items

    async def refusal(self, owner: Owner, items: Sequence[NewMemory]) -> Exception | None:
        """Why one add of all ``items`` would be refused now, as :meth:`add` says it
        (a supersede target, a running forget, a quota); None: it would pass."""
        limits = (await self.quotas(owner.tenant_id))[0]
        async with self.pool.connection() as c:
            retire = supersede.targets(items)
            refused = await supersede.refusal(c, owner, retire) if retire else None
            return refused or await self._blocked(c, owner, items, limits)

    async def _blocked(
        self,
        conn: AsyncConnection,
        owner: Owner,
        items: Sequence[NewMemory],
        limits: quota.Quota,
        earlier: Sequence[NewMemory] = (),
    ) -> ForgetInProgress | quota.QuotaExceeded | None:
        """What stops an add of ``items`` now: a running forget, else a quota; or None."""
        if not await self.guard_passes(conn, owner, items):
            return ForgetInProgress(owner)
        return await quota.exceeded(conn, limits, owner, items, earlier)

    async def _retained(self, tenant_id: str, items: Sequence[NewMemory]) -> Sequence[NewMemory]:
        """Items without an expiry, given their type's retention (the tenant's setting)."""
        if self.retention is None or all(i.expires_at is not None for i in items):
            return items
        ttl = await self.retention(tenant_id)
        now = datetime.now(UTC)
        return [
            replace(i, expires_at=now + timedelta(seconds=ttl[i.type]))
            if i.expires_at is None and ttl.get(i.type)
            else i
            for i in items
        ]

    async def guard_passes(
        self, conn: AsyncConnection, owner: Owner, items: Sequence[NewMemory | imports.ImportedFact]
    ) -> bool:
        """The erasure guard lets ``items`` of ``owner`` be written now (on ``conn``)."""
        cur = await conn.execute(
            sql.SQL("SELECT {} AS ok").format(BATCH_GUARD),
            {
                "tenant_id": owner.tenant_id,
                "agent_id": [getattr(i, "agent_id", None) for i in items],  # facts: none
                "session_id": [i.session_id for i in items],
                **erasure.params(owner.user_id),
            },
        )
        return bool((await cur.fetchone())["ok"])

    async def update(
        self,
        owner: Owner,
        item_id: uuid.UUID,
        changes: dict[str, Any],
        embedding: np.ndarray | None,
        *,
        actor: str | None = None,
        event: str = "UPDATE",
        expected_version: int | None = None,
        conn: AsyncConnection | None = None,
    ) -> dict[str, Any] | None:
        """Partial update with history; None when the memory is not the owner's (or,
        inside work, when a forget voided it); ``VersionConflict`` off
        ``expected_version``; :class:`ForgetInProgress` during a forget (API)."""
        for name, value in changes.items():
            check_field(name, value, self.max_chars)
        classify = self.classifier is not None and embedding is not None
        if "content" in changes and classify and "profile_class" not in changes:
            # New words, new class (the type it is written with decides with them).
            kind = changes.get("type") or "semantic"
            one = NewMemory(content=changes["content"], type=kind)
            changes = {**changes, "profile_class": (await self._classes([one], [embedding]))[0]}
        query, params = update_statement(
            self.vectors,
            owner,
            item_id,
            changes,
            embedding,
            actor=actor,
            event=event,
            expected_version=expected_version,
        )
        async with using(self.pool, conn) as c:
            row = await (await c.execute(query, params)).fetchone()
        current = row.pop("current_version")
        del row["notified"]
        if row["id"] is None and current is not None:
            raise VersionConflict(current)
        row = row if row["id"] is not None else None
        if row is None and erasure.current() is None and await self._voided(owner, item_id, conn):
            raise ForgetInProgress(owner)
        return row

    async def classify_again(
        self, owner: Owner, after: uuid.UUID | None, limit: int, page: int = 200
    ) -> Classified:
        """Apply today's profile rule to ``owner``'s memories that have no class and no
        pin: those written before the rule changed (a new bar, learned weights) keep the
        class they were given until written again. At most ``limit`` memories after the
        cursor ``after`` (ids in order), ``page`` per read, their stored vectors reused
        (nothing is embedded). Only adds a class: a class the extraction model named, or
        a pin either way, is never overruled, and a memory the rule leaves out stays as
        it was. Refused while a forget of the owner runs (:class:`ForgetInProgress`, as
        an API write is); each page's statement carries the erasure guard too."""
        if self.classifier is None:
            return Classified(0, 0, None)
        async with self.pool.connection() as c:
            # the guard as for a write of the user's own (no agent, no session): a forget
            # of the whole user refuses the call; one of a session or an agent voids just
            # its rows, in each page's statement
            if not await self.guard_passes(c, owner, [NewMemory(content="")]):
                raise ForgetInProgress(owner)
        cursor = after or uuid.UUID(int=0)
        examined = classified = 0
        params = {"tenant_id": owner.tenant_id, "owner": owner.user_id}
        while examined < limit:
            want = min(page, limit - examined)
            async with self.pool.connection() as c:
                cur = await c.execute(
                    self._unclassified_sql, {**params, "after": cursor, "limit": want}
                )
                rows = await cur.fetchall()
            if not rows:
                return Classified(examined, classified, None)
            examined += len(rows)
            cursor = rows[-1]["id"]
            found = await self.classifier.classify_many(
                [r["content"] for r in rows],
                [r["type"] for r in rows],
                np.stack([as_array(r["embedding"]) for r in rows]),
            )
            joined = [(r["id"], cls) for r, cls in zip(rows, found, strict=True) if cls]
            if joined:
                ids, classes = zip(*joined, strict=True)
                async with self.pool.connection() as c:
                    cur = await c.execute(
                        self._classify_sql,
                        {
                            "tenant_id": owner.tenant_id,
                            "ids": list(ids),
                            "classes": list(classes),
                            "channel": CHANGES_CHANNEL,
                            **erasure.params(owner.user_id),
                        },
                    )
                    classified += (await cur.fetchone())["classified"]
            if len(rows) < want:
                return Classified(examined, classified, None)
        return Classified(examined, classified, cursor)

    async def _voided(self, owner: Owner, item_id: uuid.UUID, conn: AsyncConnection | None) -> bool:
        """The owner's memory exists but the erasure guard refuses writing it."""
        query = sql.SQL(
            "SELECT {} AS ok FROM memory_items WHERE id = %(id)s AND tenant_id = %(tenant_id)s"
            " AND user_id IS NOT DISTINCT FROM %(user_id)s"
        ).format(erasure.clause(sql.SQL("agent_id"), sql.SQL("session_id")))
        params = {
            "id": item_id,
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            **erasure.params(owner.user_id),
        }
        async with using(self.pool, conn) as c:
            found = await (await c.execute(query, params)).fetchone()
        return found is not None and not found["ok"]

    async def delete(self, owner: Owner, item_id: uuid.UUID, *, actor: str | None = None) -> bool:
        """Delete one memory (its history loses its content, right to be forgotten); a
        document's chunk is not one. Deletes need no guard."""
        where, params = one_memory(owner, item_id)
        return await self._delete_where(where, params, actor) > 0

    async def delete_scope(
        self,
        owner: Owner,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        actor: str | None = None,
    ) -> int:
        # The whole set (an agent's shared memories, or all of a user's) takes its
        # documents: ingest jobs first (none lands after the chunks' delete),
        # then the chunks with the memories, then heads and versions. A delete narrowed
        # to an agent or session leaves a user's documents, whose chunks carry neither.
        whole = session_id is None and (owner.user_id is None) == (agent_id is not None)
        key = owner.user_id or owner_key(None, "agent", agent_id)
        if whole:
            async with self.pool.connection() as conn:
                await DocumentJobStore.drop_owner(conn, owner.tenant_id, key)
        scope = _owner_scope(owner, agent_id, session_id)
        n = await self._delete_where(*scope, actor) if scope is not None else 0
        if whole:
            async with self.pool.connection() as conn:
                await DocumentStore.erase_owner(conn, owner.tenant_id, key)
        return n

    async def _delete_where(
        self, where: sql.Composable, params: dict[str, Any], actor: str | None
    ) -> int:
        """Delete matching items (vectors cascade), forget and log them, bump: one statement."""
        query = delete_statement(where)
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, {**params, "actor": actor, "channel": CHANGES_CHANNEL})
            return (await cur.fetchone())["deleted"]

    # ---------- facts ----------

    async def upsert_fact(
        self,
        owner: Owner,
        category: str,
        key: str,
        value: str,
        confidence: float,
        *,
        session_id: str | None = None,
        source: str = "extraction",
        importance: float = 0.5,
        conn: AsyncConnection | None = None,
        valid_from: datetime | None = None,
    ) -> str:
        """Apply one fact; returns added | replaced | confirmed | ignored | erased. A new
        key over the fact quota raises ``QuotaExceeded``; a running forget (outside work)
        :class:`ForgetInProgress`."""
        check_fact(category, key, value, confidence, importance, self.max_chars)
        optional_id("session_id", session_id)
        text("source", source, ID_CHARS)
        when("valid_from", valid_from)
        if owner.user_id is None:
            raise ValidationError("facts belong to a user")
        fact_quota = (await self.quotas(owner.tenant_id))[1]
        guard = sql.SQL("SELECT {} AS ok").format(erasure.clause(None, sql.SQL("%(session)s")))
        guard_params = {
            "tenant_id": owner.tenant_id,
            "session": session_id or "",
            **erasure.params(owner.user_id),
        }

        async def gate(c: AsyncConnection, adds: bool) -> str | None:
            if not (await (await c.execute(guard, guard_params)).fetchone())["ok"]:
                if erasure.current() is not None:
                    return "erased"
                raise ForgetInProgress(owner)
            if adds and fact_quota.active:
                refused = await quota.facts_exceeded(c, fact_quota, owner)
                if refused is not None:
                    raise refused
            return None

        # The rules, under the key's lock, the gate first: the same value is confirmed;
        # source ``user`` (explicit) replaces whatever is active; other sources need
        # greater-or-equal confidence and never replace an explicit value.
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "category": category,
            "key": key,
            "value": value,
            "confidence": confidence,
            "source": source,
            "session_id": session_id,
            "importance": importance,
        }
        async with using(self.pool, conn) as conn, conn.transaction():
            await conn.execute(fact_writes.LOCK_KEY, fact_writes.lock_params(owner, category, key))
            active = await (await conn.execute(fact_writes.ACTIVE, params)).fetchone()
            stop = await gate(conn, active is None)
            if stop is not None:
                return stop
            explicit = source == EXPLICIT
            if active is not None and normalize(active["value"]) == normalize(value):
                confirm = {**params, "id": active["id"], "explicit": explicit}
                await conn.execute(fact_writes.CONFIRM, confirm)
                return "confirmed"
            if (
                active is not None
                and not explicit
                and (confidence < active["confidence"] or active["source"] == EXPLICIT)
            ):
                return "ignored"
            params["id"] = uuid.uuid4()
            if active is not None:
                retire = {"new_id": params["id"], "id": active["id"], "valid_from": valid_from}
                await conn.execute(fact_writes.RETIRE, retire)
            await conn.execute(fact_writes.INSERT, {**params, "valid_from": valid_from})
            return "added" if active is None else "replaced"

    async def delete_facts(
        self, owner: Owner, category: str | None = None, key: str | None = None
    ) -> int:
        """Delete the user's facts (every version), optionally one category or one key."""
        query, params = fact_writes.delete_statement(owner, category, key)
        async with self.pool.connection() as conn:
            return (await conn.execute(query, params)).rowcount


def _owner_scope(
    owner: Owner, agent_id: str | None, session_id: str | None
) -> tuple[sql.Composable, dict[str, Any]] | None:
    """Where-clause and parameters of a delete of the owner's memories, optionally narrowed
    to an agent and/or session. The shared owner (``user_id`` None) has one scope to
    delete: an agent's shared (``@agent:<id>``) memories of the tenant; org memories go by
    id only (None: nothing to delete)."""
    if owner.user_id is None:
        if agent_id is None or session_id is not None:
            return None
        where = sql.SQL("tenant_id = %(tenant_id)s AND scope = 'agent' AND agent_id = %(agent_id)s")
        return where, {"tenant_id": owner.tenant_id, "agent_id": agent_id}
    scope = Scope(owner.tenant_id, owner.user_id, agent_id, session_id)
    return scope.where(("user_id", "agent_id", "session_id"))
