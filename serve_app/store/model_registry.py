"""``embedding_models``: which vector tables exist and which one serves (migration 0009).

A model change must not drop every memory out of search: the configured model's
table is registered as ``filling`` and re-embedded in the background
(:mod:`serve_app.reembed.worker`) while the ``active`` table keeps serving search and
dedup; when the fill completes the worker switches them in one transaction and
NOTIFYs ``memserve_models`` so every replica follows. The old table is then
``retired`` until an admin drops it.

The start-up work (:func:`reconcile`) is synchronous, like the rest of the bootstrap;
replicas read and change the registry with the async functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from serve_app.store.vectors import table_name

log = logging.getLogger("memserve")

MODELS_CHANNEL = "memserve_models"
REEMBED_LOCK = 0x6D656D65  # advisory lock of the one re-embed worker ("meme")
_RECONCILE_LOCK = 0x6D656D6D  # start-up reconcile of the registry ("memm")

State = Literal["active", "filling", "retired"]
_COLUMNS = (
    "slug, ref, name, dim, state, cursor_seq, done, total, synced_until, settle_until,"
    " activated_at, retired_at"
)


@dataclass(frozen=True)
class ModelRow:
    """One registered vector table."""

    slug: str
    ref: str
    name: str
    dim: int
    state: State
    cursor_seq: int = 0
    done: int = 0
    total: int = 0
    synced_until: datetime | None = None
    settle_until: datetime | None = None
    activated_at: datetime | None = None
    retired_at: datetime | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> ModelRow:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    @property
    def progress(self) -> float:
        """Share of the items embedded into this table (1.0 once it serves)."""
        if self.state == "active":
            return 1.0
        return min(1.0, self.done / self.total) if self.total else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["table"] = table_name(self.slug)
        out["progress"] = round(self.progress, 4)
        return out


@dataclass(frozen=True)
class Wanted:
    """The configured model, as the bootstrap resolved it."""

    slug: str
    ref: str
    name: str
    dim: int


#: slug -> (ref, name, dim) of a spec that writes that table, or None (adopting legacy tables)
SlugResolver = Callable[[str], Wanted | None]


# ---------------------------------------------------------------- start-up (sync)
def reconcile(
    dsn: str, wanted: Wanted, resolve: SlugResolver, *, margin_s: float = 30.0
) -> tuple[ModelRow, ModelRow | None]:
    """Register the configured model; return (active, filling or None).

    First start (empty registry): the configured model is active, unless an older
    install left memories in another model's table (adopted as active, so they stay
    searchable while the configured one fills). Configured = active: nothing to do
    (an unfinished fill of another model is abandoned, retired). Otherwise the
    configured model fills (a fill already under way resumes from its cursor; a
    retired table is refilled from the start).
    """
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_RECONCILE_LOCK,))
        try:
            with conn.transaction():
                return _reconcile(conn, wanted, resolve, margin_s)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_RECONCILE_LOCK,))


def _reconcile(
    conn: psycopg.Connection, wanted: Wanted, resolve: SlugResolver, margin_s: float
) -> tuple[ModelRow, ModelRow | None]:
    rows = {r.slug: r for r in _all(conn)}
    active = next((r for r in rows.values() if r.state == "active"), None)
    if active is None:
        legacy = _legacy(conn, wanted, resolve)
        _insert(conn, legacy, "active")
        active = _row(conn, legacy.slug)
        log.info("model registry: %s is the active embedding model", active.name)
    if active.slug == wanted.slug:
        if active.ref != wanted.ref:  # same spec, loaded from elsewhere now
            conn.execute(
                "UPDATE embedding_models SET ref = %s, updated_at = now() WHERE slug = %s",
                (wanted.ref, wanted.slug),
            )
        _retire_fills(conn, keep=None)
        return _row(conn, active.slug), None
    current = rows.get(wanted.slug)
    if current is None:
        _insert(conn, wanted, "filling", margin_s)
    elif current.state == "retired":  # its table missed every write since it retired
        conn.execute(
            "UPDATE embedding_models SET state = 'filling', ref = %(ref)s, cursor_seq = 0,"
            " done = 0, retired_at = NULL, synced_until = now() - make_interval(secs => %(m)s),"
            " updated_at = now() WHERE slug = %(slug)s",
            {"ref": wanted.ref, "slug": wanted.slug, "m": margin_s},
        )
    _retire_fills(conn, keep=wanted.slug)
    conn.execute(
        "UPDATE embedding_models SET total = (SELECT count(*) FROM memory_items),"
        " updated_at = now() WHERE slug = %s",
        (wanted.slug,),
    )
    filling = _row(conn, wanted.slug)
    log.info(
        "model registry: %s serves while %s is re-embedded (%d of %d items done)",
        active.name,
        filling.name,
        filling.done,
        filling.total,
    )
    conn.execute("SELECT pg_notify(%s, %s)", (MODELS_CHANNEL, filling.slug))
    return _row(conn, active.slug), filling


def _legacy(conn: psycopg.Connection, wanted: Wanted, resolve: SlugResolver) -> Wanted:
    """The model whose table an install from before the registry filled, else ``wanted``."""
    found = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        " AND tablename LIKE 'memory\\_vectors\\_%'"
    ).fetchall()
    best: tuple[int, Wanted] | None = None
    for r in found:
        slug = r["tablename"].removeprefix("memory_vectors_")
        n = conn.execute(
            sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(r["tablename"]))
        ).fetchone()["n"]
        if not n:
            continue
        if slug == wanted.slug:
            return wanted  # the configured table already holds memories
        spec = resolve(slug)
        if spec is None:
            log.warning("table %s has no known model spec; not adopted", r["tablename"])
        elif best is None or n > best[0]:
            best = (n, spec)
    return best[1] if best else wanted


def _insert(conn: psycopg.Connection, m: Wanted, state: State, margin_s: float = 0.0) -> None:
    conn.execute(
        "INSERT INTO embedding_models (slug, ref, name, dim, state, activated_at, synced_until)"
        " VALUES (%(slug)s, %(ref)s, %(name)s, %(dim)s, %(state)s,"
        " CASE WHEN %(state)s = 'active' THEN now() END,"
        " now() - make_interval(secs => %(m)s))",
        {"slug": m.slug, "ref": m.ref, "name": m.name, "dim": m.dim, "state": state, "m": margin_s},
    )


def _retire_fills(conn: psycopg.Connection, keep: str | None) -> None:
    conn.execute(
        "UPDATE embedding_models SET state = 'retired', retired_at = now(), updated_at = now()"
        " WHERE state = 'filling' AND slug IS DISTINCT FROM %s",
        (keep,),
    )


def _all(conn: psycopg.Connection) -> list[ModelRow]:
    cur = conn.execute(f"SELECT {_COLUMNS} FROM embedding_models ORDER BY created_at, slug")
    return [ModelRow.of(r) for r in cur.fetchall()]


def _row(conn: psycopg.Connection, slug: str) -> ModelRow:
    cur = conn.execute(f"SELECT {_COLUMNS} FROM embedding_models WHERE slug = %s", (slug,))
    return ModelRow.of(cur.fetchone())


# ---------------------------------------------------------------- replicas (async)
async def models(conn: psycopg.AsyncConnection) -> list[ModelRow]:
    """Every registered table, oldest first (``conn`` returns dict rows, as every one here does)."""
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM embedding_models ORDER BY created_at, slug",
        prepare=False,
    )
    return [ModelRow.of(r) for r in await cur.fetchall()]


class DropRefused(RuntimeError):
    """Only a retired table may be dropped, and not while a switch still settles."""


async def drop_retired(conn: psycopg.AsyncConnection, slug: str) -> ModelRow:
    """Drop a retired model's vector table and forget it; NOTIFY the replicas."""
    async with conn.transaction():
        cur = await conn.execute(
            f"SELECT {_COLUMNS} FROM embedding_models WHERE slug = %s FOR UPDATE", (slug,)
        )
        row = await cur.fetchone()
        if row is None:
            raise LookupError(slug)
        found = ModelRow.of(row)
        if found.state != "retired":
            raise DropRefused(f"{found.name} is {found.state}; only a retired table is dropped")
        cur = await conn.execute(
            "SELECT 1 FROM embedding_models WHERE state = 'active' AND settle_until > now()"
        )
        if await cur.fetchone() is not None:
            raise DropRefused("a model switch is still settling; try again in a minute")
        table = sql.Identifier(table_name(slug))
        await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        await conn.execute("DELETE FROM embedding_models WHERE slug = %s", (slug,))
        await conn.execute("SELECT pg_notify(%s, %s)", (MODELS_CHANNEL, slug))
    return found


def describe(rows: list[ModelRow]) -> str:
    """One line for ``/readyz``: what serves, and the progress of a fill."""
    active = next((r for r in rows if r.state == "active"), None)
    filling = next((r for r in rows if r.state == "filling"), None)
    text = f"ok ({active.name})" if active else "ok (no model registered)"
    if filling is not None:
        text += (
            f"; re-embedding into {filling.name}: {filling.done}/{filling.total}"
            f" ({filling.progress:.0%})"
        )
    return text
