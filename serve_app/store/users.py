"""Who a tenant's users are and where their sessions stand: the console's directory.

Users are not a table of their own: a user exists by what is stored for them (memories,
facts, session turns). One statement per page joins the three, keyed by user id (a page
after a user id, so a page costs the same wherever it starts), with the counts an
operator looks at first and the last time anything was written for the user.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import live, valid

# The page's user ids first, each table walked in user-id order on its (tenant_id,
# user_id, ...) index and stopped after a page; then counts for those users alone. An
# aggregate over every user after the cursor, cut to a page at the end, cost the whole
# tenant per page (paging through it: pages x rows).
_PAGE = """
    (SELECT DISTINCT user_id FROM {table}
     WHERE tenant_id = %(t)s AND user_id IS NOT NULL AND user_id > %(after)s
       AND (%(u)s::text IS NULL OR user_id = %(u)s){extra}
     ORDER BY user_id LIMIT %(fetch)s)"""
_USERS_SQL = f"""
WITH ids AS (
    SELECT user_id FROM (
        {_PAGE.format(table="memory_items", extra=f" AND {live()}")}
        UNION {_PAGE.format(table="facts", extra="")}
        UNION {_PAGE.format(table="session_turns", extra="")}
    ) page ORDER BY user_id LIMIT %(fetch)s
), m AS (
    SELECT user_id,
           count(*) FILTER (WHERE status = 'active' AND {valid()}) AS memories,
           count(*) FILTER (WHERE status <> 'active') AS archived,
           max(updated_at) AS last
    FROM memory_items
    WHERE tenant_id = %(t)s AND user_id IN (SELECT user_id FROM ids) AND {live()}
    GROUP BY user_id
), f AS (
    SELECT user_id, count(*) FILTER (WHERE active) AS facts, max(updated_at) AS last
    FROM facts
    WHERE tenant_id = %(t)s AND user_id IN (SELECT user_id FROM ids)
    GROUP BY user_id
), s AS (
    SELECT user_id, count(DISTINCT session_id) AS sessions,
           count(*) FILTER (WHERE extracted_at IS NULL AND dead_at IS NULL) AS pending_turns,
           count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead_turns,
           max(created_at) AS last
    FROM session_turns
    WHERE tenant_id = %(t)s AND user_id IN (SELECT user_id FROM ids)
    GROUP BY user_id
)
SELECT user_id,
       coalesce(m.memories, 0) AS memories, coalesce(m.archived, 0) AS archived,
       coalesce(f.facts, 0) AS facts, coalesce(s.sessions, 0) AS sessions,
       coalesce(s.pending_turns, 0) AS pending_turns, coalesce(s.dead_turns, 0) AS dead_turns,
       greatest(m.last, f.last, s.last) AS last_activity
FROM ids LEFT JOIN m USING (user_id) LEFT JOIN f USING (user_id) LEFT JOIN s USING (user_id)
ORDER BY user_id
"""

_SESSIONS_SQL = """
SELECT t.session_id, count(*) AS turns,
       count(*) FILTER (WHERE t.extracted_at IS NULL AND t.dead_at IS NULL) AS pending_turns,
       count(*) FILTER (WHERE t.extracted_at IS NOT NULL) AS extracted_turns,
       count(*) FILTER (WHERE t.dead_at IS NOT NULL) AS dead_turns,
       count(*) FILTER (WHERE t.extract_error IS NOT NULL) AS failed_turns,
       min(t.created_at) AS started_at, max(t.created_at) AS last_turn_at,
       bool_or(st.ended_at IS NOT NULL) AS ended
FROM session_turns t
LEFT JOIN session_state st USING (tenant_id, user_id, session_id)
WHERE t.tenant_id = %(t)s AND t.user_id = %(u)s
GROUP BY t.session_id ORDER BY max(t.created_at) DESC, t.session_id LIMIT %(limit)s
"""


class UserDirectory:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def users(
        self, tenant_id: str, *, only: str | None, after: str, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the tenant's users by id after ``after`` (``only``: that user alone),
        and the cursor of the next page (None: the last page)."""
        params = {"t": tenant_id, "u": only, "after": after, "fetch": limit + 1}
        async with self.pool.connection() as conn:
            cur = await conn.execute(_USERS_SQL, params)
            rows = await cur.fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (rows[-1]["user_id"] if more else None)

    async def sessions(self, tenant_id: str, user_id: str, limit: int) -> list[dict[str, Any]]:
        """The user's sessions, latest turn first, with their turns' extraction states."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(_SESSIONS_SQL, {"t": tenant_id, "u": user_id, "limit": limit})
            return await cur.fetchall()
