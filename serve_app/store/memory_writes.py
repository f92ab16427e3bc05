"""Statement builders for writes to ``memory_items``: a batch add, an update, deletes,
and the history and owner-version CTEs every write appends.

Each write is one statement (data-modifying CTEs): the items, their vectors, their
history and the owner-version bump with its NOTIFY go in one round trip and commit or
fail together (the pool's connections are in autocommit: one statement is one
transaction). A batch of any size is still one statement. Only the writer
(:class:`serve_app.store.guarded.GuardedWriter`) runs them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from serve_app.store import erasure, history
from serve_app.store import supersede as supersede_sql
from serve_app.store.records import (
    MEMORY_COLUMNS,
    NewMemory,
    Owner,
    column_list,
    live,
    owner_key,
)
from serve_app.store.versions import CHANGES_CHANNEL, NOTIFIED, bump_ctes
from serve_app.text import dedupe_hash

UPDATABLE = frozenset(
    {"content", "tags", "metadata", "importance", "type", "confidence", "data"}
    | {"expires_at", "status"}
    | {"valid_from", "valid_until", "superseded_by"}  # validity (event time)
    | {"pinned", "profile_class"}  # the profile
)
# A document's chunk is not a memory: it changes and goes with its document (``POST`` /
# ``DELETE /v1/documents``), never alone through the memory routes, which would leave the
# document's head describing chunks that are not there.
_NOT_A_CHUNK = " AND type <> 'document_chunk'"
# The erasure guard of a batch add (any voided row refuses all of it); binds the
# batch's ``agent_id``/``session_id`` arrays and :func:`erasure.params`.
BATCH_GUARD = sql.SQL(
    "NOT EXISTS (SELECT 1 FROM unnest(%(agent_id)s::text[], %(session_id)s::text[])"
    " AS r(agent_id, session_id) WHERE NOT {})"
).format(erasure.clause(sql.SQL("r.agent_id"), sql.SQL("r.session_id")))

# What an add binds per item: (column, element type of the array it travels in).
# ``tags`` travels as jsonb because a text[][] cannot hold rows of different lengths.
_ADD_INPUT: tuple[tuple[str, str], ...] = (
    ("id", "uuid"),
    ("user_id", "text"),
    ("agent_id", "text"),
    ("session_id", "text"),
    ("scope", "text"),
    ("type", "text"),
    ("content", "text"),
    ("data", "jsonb"),
    ("tags", "jsonb"),
    ("metadata", "jsonb"),
    ("importance", "real"),
    ("confidence", "real"),
    ("dedupe_hash", "text"),
    ("source", "text"),
    ("expires_at", "timestamptz"),
    ("valid_from", "timestamptz"),
    ("supersedes", "jsonb"),  # ids as a JSON array (ragged, like tags)
    ("profile_class", "text"),  # the memory's profile class (or NULL)
    ("pinned", "boolean"),
    ("owner", "text"),  # vector table only (memory_items computes its own)
    ("embedding", "vector"),  # vector table only
)
_ITEM_INPUT = tuple(c for c, _ in _ADD_INPUT if c not in ("owner", "embedding"))
# Columns inserted from a JSON array (the rest go in as they are).
_ARRAY_OF = {
    "tags": sql.SQL("ARRAY(SELECT jsonb_array_elements_text(s.tags))"),
    "supersedes": sql.SQL("ARRAY(SELECT jsonb_array_elements_text(s.supersedes)::uuid)"),
}


def add_statement(
    vectors: sql.Identifier, gate: sql.Composable, *, supersede: bool = False
) -> sql.Composed:
    """One statement for a whole batch: items (in input order: ``seq`` is write order),
    vectors, ADD history and the owner bump, fed by column arrays unnested together.
    ``gate`` (quota, erasure guard) false: the statement writes nothing. ``supersede``:
    the items retire the memories they name (:mod:`serve_app.store.supersede`), all of
    which must pass its gate too, and those memories' owners are bumped as well."""
    if supersede:
        gate = sql.SQL("{} AND {}").format(gate, supersede_sql.GATE)
    arrays = sql.SQL(", ").join(
        sql.SQL("{}::{}[]").format(sql.Placeholder(c), sql.SQL(t)) for c, t in _ADD_INPUT
    )
    names = column_list([c for c, _ in _ADD_INPUT])
    values = sql.SQL(", ").join(_ARRAY_OF.get(c, sql.Identifier("s", c)) for c in _ITEM_INPUT)
    return sql.SQL(
        "WITH {targets} src AS (SELECT * FROM unnest({arrays}) WITH ORDINALITY AS s({names}, ord)"
        " WHERE {gate}),"
        " items AS (INSERT INTO memory_items (tenant_id, {item_cols})"
        " SELECT %(tenant_id)s, {values} FROM src s ORDER BY s.ord RETURNING {returning}),"
        " vecs AS (INSERT INTO {v} (item_id, tenant_id, owner, embedding)"
        " SELECT s.id, %(tenant_id)s, s.owner, s.embedding FROM src s),"
        " {retire} {log}"
        " SELECT items.*, {notified} AS notified FROM items"
    ).format(
        targets=supersede_sql.TARGETS if supersede else sql.SQL(""),
        retire=supersede_sql.RETIRE if supersede else sql.SQL(""),
        arrays=arrays,
        names=names,
        gate=gate,
        item_cols=column_list(_ITEM_INPUT),
        values=values,
        returning=column_list(MEMORY_COLUMNS),
        v=vectors,
        log=log_and_bump(
            "src",
            "ADD",
            "content",
            order="ord",
            more_owners=supersede_sql.RETIRED_OWNERS if supersede else None,
        ),
        notified=NOTIFIED,
    )


def delete_statement(where: sql.Composable) -> sql.Composed:
    """Delete the ``memory_items`` matching ``where`` (vectors cascade), blank and log
    their history, bump their owners: one statement (binds ``tenant_id``, ``actor``,
    ``channel``); answers ``deleted`` and ``notified``."""
    return sql.SQL(
        "WITH gone AS (DELETE FROM memory_items WHERE {where} RETURNING id, user_id, owner),"
        " {forget}, {log}"
        " SELECT (SELECT count(*) FROM gone) AS deleted, {notified} AS notified"
    ).format(
        where=where,
        forget=history.forget_cte("forgotten", sql.SQL("SELECT id FROM gone")),
        log=log_and_bump("gone", "DELETE", "NULL"),
        notified=NOTIFIED,
    )


def log_and_bump(
    rows: str,
    event: str,
    new_content: str,
    *,
    order: str = "id",
    more_owners: sql.Composable | None = None,
) -> sql.Composed:
    """CTEs logging ``event`` for each row of CTE ``rows`` (no old content) and bumping
    the owners of those rows (``rows`` has ``id, user_id, owner`` and ``new_content``)
    and those ``more_owners`` (a query of one ``owner`` column) yields."""
    owners = sql.SQL("SELECT owner FROM {}").format(sql.Identifier(rows))
    if more_owners is not None:
        owners = sql.SQL("{} UNION ALL {}").format(owners, more_owners)
    events = sql.SQL(
        "SELECT id AS memory_id, user_id, {event}::text AS event, NULL::text AS old_content,"
        " {new}::text AS new_content FROM {rows} ORDER BY {order}"
    ).format(
        event=sql.Literal(event),
        new=sql.SQL(new_content),
        rows=sql.Identifier(rows),
        order=sql.Identifier(order),
    )
    return sql.SQL("{}, {}").format(
        history.record_cte("hist", events),
        bump_ctes(owners),
    )


def add_params(
    owner: Owner,
    items: Sequence[NewMemory],
    embeddings: Any,
    classes: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """Column arrays for ``add_statement`` (ids are made here so rows map back to inputs);
    ``classes``: each item's profile class when the item names none."""
    cols: dict[str, list[Any]] = {c: [] for c, _ in _ADD_INPUT}
    classes = classes or [None] * len(items)
    for item, vector, auto in zip(items, embeddings, classes, strict=True):
        user_id = owner.user_id if item.scope in ("user", "session") else None
        row = {
            "id": uuid.uuid4(),
            "user_id": user_id,
            "agent_id": item.agent_id,
            "session_id": item.session_id,
            "scope": item.scope,
            "type": item.type,
            "content": item.content,
            "data": Jsonb(item.data),
            "tags": Jsonb(list(item.tags)),
            "metadata": Jsonb(item.metadata),
            "importance": item.importance,
            "confidence": item.confidence,
            "dedupe_hash": dedupe_hash(item.content),
            "source": item.source,
            "expires_at": item.expires_at,
            "valid_from": item.valid_from,
            "supersedes": Jsonb([str(i) for i in item.supersedes]),
            "profile_class": item.profile_class or auto,
            "pinned": item.pinned,
            "owner": owner_key(user_id, item.scope, item.agent_id),
            "embedding": np.asarray(vector, dtype=np.float32),
        }
        for c, values in cols.items():
            values.append(row[c])
    return {**cols, "tenant_id": owner.tenant_id, "channel": CHANGES_CHANNEL}


def update_statement(
    vectors: sql.Identifier,
    owner: Owner,
    item_id: uuid.UUID,
    changes: dict[str, Any],
    embedding: np.ndarray | None,
    *,
    actor: str | None,
    event: str,
    expected_version: int | None,
) -> tuple[sql.Composed, dict[str, Any]]:
    """A partial update of one live memory of the owner (not a document's chunk): bumps
    ``version`` unless the row is not at ``expected_version``, re-vectors it when an
    ``embedding`` comes, logs ``event``; the erasure guard voids it. Answers the row
    (``id`` None when nothing was updated) with ``current_version`` and ``notified``."""
    unknown = set(changes) - UPDATABLE
    if unknown:
        raise ValueError(f"cannot update {sorted(unknown)}")
    params: dict[str, Any] = {
        "id": item_id,
        "tenant_id": owner.tenant_id,
        "user_id": owner.user_id,
        "event": event,
        "actor": actor,
        "channel": CHANGES_CHANNEL,
        "expected": expected_version,
    }
    sets = [sql.SQL("updated_at = now()"), sql.SQL("version = i.version + 1")]
    for key, value in changes.items():
        sets.append(sql.SQL("{} = {}").format(sql.Identifier(key), sql.Placeholder(f"new_{key}")))
        params[f"new_{key}"] = Jsonb(value) if key in ("metadata", "data") else value
    if "content" in changes:
        sets.append(sql.SQL("dedupe_hash = %(new_dedupe_hash)s"))
        params["new_dedupe_hash"] = dedupe_hash(changes["content"])
    params.update(erasure.params(owner.user_id))  # a voiding forget: no row
    revector = sql.SQL("")
    if embedding is not None:
        params["embedding"] = np.asarray(embedding, dtype=np.float32)
        revector = sql.SQL(
            " vec AS (UPDATE {v} v SET embedding = %(embedding)s FROM upd"
            " WHERE v.item_id = upd.id AND v.tenant_id = %(tenant_id)s),"
        ).format(v=vectors)
    query = sql.SQL(
        "WITH old AS (SELECT id, user_id, owner, content, version FROM memory_items"
        " WHERE id = %(id)s AND tenant_id = %(tenant_id)s"
        " AND user_id IS NOT DISTINCT FROM %(user_id)s AND "
        + live()
        + _NOT_A_CHUNK
        + " AND {guard} FOR UPDATE),"
        " upd AS (UPDATE memory_items i SET {sets} FROM old WHERE i.id = old.id"
        " AND (%(expected)s::int IS NULL OR i.version = %(expected)s)"
        " RETURNING {returning}),{revector} {history}, {bump}"
        " SELECT upd.*, {notified} AS notified, (SELECT version FROM old) AS current_version"
        " FROM (SELECT 1) one LEFT JOIN upd ON true"
    ).format(
        sets=sql.SQL(", ").join(sets),
        guard=erasure.clause(sql.SQL("agent_id"), sql.SQL("session_id")),
        returning=column_list(MEMORY_COLUMNS, "i"),
        revector=revector,
        history=history.record_cte(
            "hist",
            sql.SQL(
                "SELECT old.id AS memory_id, old.user_id, %(event)s::text AS event,"
                " old.content AS old_content, upd.content AS new_content"
                " FROM old JOIN upd ON upd.id = old.id"
            ),
        ),
        bump=bump_ctes(sql.SQL("SELECT old.owner FROM old JOIN upd ON upd.id = old.id")),
        notified=NOTIFIED,
    )
    return query, params


def one_memory(owner: Owner, item_id: uuid.UUID) -> tuple[sql.Composable, dict[str, Any]]:
    """Where-clause and parameters of a delete of one memory (a document's chunk is not
    one: it goes with its document)."""
    where = sql.SQL(
        "id = %(id)s AND tenant_id = %(tenant_id)s AND user_id IS NOT DISTINCT FROM %(user_id)s"
        + _NOT_A_CHUNK
    )
    return where, {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id}


def classify_statement() -> sql.Composed:
    """Give memories the profile class the rule gives them now (``ids`` and ``classes``,
    two arrays), each only while it still has no class and no pin and no forget of it
    runs (the erasure guard, as every write), and bump the owners whose memories
    changed: one statement (binds ``tenant_id``, ``ids``, ``classes``, ``channel`` and
    :func:`erasure.params`); answers ``classified`` and ``notified``. No history event:
    the memory's words are not changed, only which section of a block it is shown in."""
    return sql.SQL(
        "WITH got AS (UPDATE memory_items i SET profile_class = c.cls"
        " FROM unnest(%(ids)s::uuid[], %(classes)s::text[]) AS c(id, cls)"
        " WHERE i.id = c.id AND i.tenant_id = %(tenant_id)s"
        " AND i.profile_class IS NULL AND i.pinned IS NULL AND i.status = 'active'"
        " AND {guard} RETURNING i.owner), {bump}"
        " SELECT (SELECT count(*) FROM got) AS classified, {notified} AS notified"
    ).format(
        guard=erasure.clause(sql.SQL("i.agent_id"), sql.SQL("i.session_id")),
        bump=bump_ctes(sql.SQL("SELECT owner FROM got")),
        notified=NOTIFIED,
    )
