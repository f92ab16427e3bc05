"""``DataApi``: sessions, facts, users, the chat proxy, and export/import (see ``api``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, ParamSpec

from serve_app.client.call import Call, Message, clean, to_messages, with_body, with_params
from serve_app.client.chunks import ImportData, to_lines
from serve_app.client.endpoint import Endpoint, Stream
from serve_app.client.streams import JsonLines, ServerSentEvents
from serve_app.responses import (
    EventPage,
    Fact,
    FactList,
    ImportReport,
    SessionEnded,
    SessionList,
    SessionStatus,
    TurnsAccepted,
    UsageResponse,
    UserList,
)
from serve_app.schemas import DeletedCount, ProfileResponse

Json = dict[str, Any]
NDJSON = "application/x-ndjson"
P = ParamSpec("P")


def chat_call(
    messages: Iterable[Message],
    *,
    model: str | None = None,
    user: str | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    occurred_at: datetime | str | None = None,
    **options: Any,
) -> Call[Json]:
    """An OpenAI chat completion with the user's memories added; ``user``: the end user
    (a service key); ``options`` (temperature, ...) go to the upstream as given."""
    headers = clean(
        {
            "X-Memserve-Session": session_id,
            "X-Memserve-Agent": agent_id,
            "X-Memserve-Occurred-At": occurred_at,
        }
    )
    body = clean({"model": model, "user": user, **options})
    body.update(messages=to_messages(messages), stream=False)
    return Call("POST", "/v1/chat/completions", json=body, headers=headers or None)


def streamed(build: Callable[P, Call[Json]]) -> Callable[P, Call[Json]]:
    """The same call streamed: each ``chat.completion.chunk``; a stream cut before
    ``[DONE]`` raises ``Unavailable``."""

    @functools.wraps(build)
    def call(*args: P.args, **kwargs: P.kwargs) -> Call[Json]:
        plain = build(*args, **kwargs)
        return replace(plain, json={**plain.json, "stream": True}, lines=ServerSentEvents)

    call.__doc__ = streamed.__doc__
    return call


class DataApi:
    """Calls on a user's sessions, facts and data, and the tenant's users."""

    # sessions
    @Endpoint
    @staticmethod
    def add_turns(
        session_id: str,
        messages: Iterable[Message],
        *,
        user_id: str | None = None,
        **options: Any,
    ) -> Call[TurnsAccepted]:
        """``options``: agent_id. Turns are buffered and extracted in the background. A
        message may be a mapping with ``name`` (who said it) and ``speaker_id`` (the
        tenant's user who said it, in a group session) besides role and content."""
        body = {"user_id": user_id, "messages": to_messages(messages), **options}
        return with_body("POST", f"/v1/sessions/{session_id}/turns", body, TurnsAccepted)

    @Endpoint
    @staticmethod
    def end_session(
        session_id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> Call[SessionEnded]:
        body = {"user_id": user_id, "agent_id": agent_id}
        return with_body("POST", f"/v1/sessions/{session_id}/end", body, SessionEnded)

    @Endpoint
    @staticmethod
    def session_status(session_id: str, *, user_id: str | None = None) -> Call[SessionStatus]:
        """Where the session's turns stand in extraction (also an ``infer`` job's status)."""
        path = f"/v1/sessions/{session_id}"
        return with_params("GET", path, {"user_id": user_id}, SessionStatus)

    # facts
    @Endpoint
    @staticmethod
    def facts(
        *,
        user_id: str | None = None,
        include_inactive: bool | None = None,
        category: str | None = None,
        as_of: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Call[FactList]:
        """A page of facts; pass ``next_cursor`` back as ``cursor`` for the next."""
        params = {
            "user_id": user_id,
            "include_inactive": include_inactive,
            "category": category,
            "as_of": as_of,
            "limit": limit,
            "cursor": cursor,
        }
        return with_params("GET", "/v1/facts", params, FactList)

    @Endpoint
    @staticmethod
    def set_fact(
        category: str,
        key: str,
        value: str,
        *,
        user_id: str | None = None,
        valid_from: datetime | str | None = None,
    ) -> Call[Fact]:
        """Correct a fact: it wins over extracted values; the old one stays in history."""
        body = {
            "user_id": user_id,
            "category": category,
            "key": key,
            "value": value,
            "valid_from": valid_from,
        }
        return with_body("PUT", "/v1/facts", body, Fact)

    @Endpoint
    @staticmethod
    def delete_facts(
        *, user_id: str | None = None, category: str | None = None, key: str | None = None
    ) -> Call[DeletedCount]:
        """Every version of the user's facts: all, one category, or one category/key."""
        params = {"user_id": user_id, "category": category, "key": key}
        return with_params("DELETE", "/v1/facts", params, DeletedCount)

    # users
    @Endpoint
    @staticmethod
    def users(*, limit: int | None = None, cursor: str | None = None) -> Call[UserList]:
        """The tenant's users (a user key: itself), a page; ``next_cursor`` the next."""
        return with_params("GET", "/v1/users", {"limit": limit, "cursor": cursor}, UserList)

    @Endpoint
    @staticmethod
    def user_sessions(user_id: str, *, limit: int | None = None) -> Call[SessionList]:
        path = f"/v1/users/{user_id}/sessions"
        return with_params("GET", path, {"limit": limit}, SessionList)

    @Endpoint
    @staticmethod
    def user_profile(user_id: str, *, agent_id: str | None = None) -> Call[ProfileResponse]:
        """The user's profile: what every context block starts with, and why."""
        path = f"/v1/users/{user_id}/profile"
        return with_params("GET", path, {"agent_id": agent_id}, ProfileResponse)

    # events
    @Endpoint
    @staticmethod
    def events(
        *,
        after: str | None = None,
        types: list[str] | None = None,
        user_id: str | None = None,
        limit: int | None = None,
        include_content: bool | None = None,
        order: str | None = None,
    ) -> Call[EventPage]:
        """Events after ``after`` (a page's ``next_cursor``), oldest first; a user key
        reads its own user's; ``include_content``: the memory or fact text too;
        ``order="desc"``: the ones before ``after`` (none: the newest), newest first."""
        params = {
            "after": after,
            "types": ",".join(types) if types else None,
            "user_id": user_id,
            "limit": limit,
            "include_content": include_content,
            "order": order,
        }
        return with_params("GET", "/v1/events", params, EventPage)

    # the chat proxy (its answers are the upstream's OpenAI JSON: plain dicts)
    chat = Endpoint(chat_call)
    chat_stream = Stream(streamed(chat_call))

    @Endpoint
    @staticmethod
    def chat_usage() -> Call[UsageResponse]:
        """The chat proxy's use per day: this key's, or every key's of the tenant (admin)."""
        return Call("GET", "/v1/chat/usage", model=UsageResponse)

    # export / import
    @Stream
    @staticmethod
    def export(*, user_id: str | None = None) -> Call[Json]:
        """The user's records as they stream in (``header``, ``memory``, ``fact``,
        ``history``, ``end``); a stream cut before ``end`` raises ``Unavailable``."""
        return replace(with_params("GET", "/v1/export", {"user_id": user_id}), lines=JsonLines)

    @Endpoint
    @staticmethod
    def import_(data: ImportData, *, user_id: str | None = None) -> Call[ImportReport]:
        """Load an export (ours or mem0's; text, or records) in one request, all or
        nothing; ``import_all`` splits one larger than the service's limits."""
        body = "".join(line + "\n" for line in to_lines(data)).encode()
        params, headers = clean({"user_id": user_id}), {"Content-Type": NDJSON}
        return Call("POST", "/v1/import", params, model=ImportReport, headers=headers, content=body)
