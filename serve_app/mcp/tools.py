"""The MCP tools: memserve's memory calls as tools an agent can use.

Every tool is a call of the HTTP API made with the caller's own key (through
``serve_app.client``), so the MCP server adds no second path to the data: the same
authentication, validation, limits and isolation apply, and another user's memory
answers like a missing one. A ``Connector`` says how the calls reach the API: in the
Ingress, in-process (``serve_app.mcp.http``); for desktop agents, over the network
(``serve_app.mcp.stdio``).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import date, datetime
from typing import Annotated, Any, Literal, Protocol
from uuid import UUID

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from serve_app import __version__
from serve_app.client import AsyncMemserveClient
from serve_app.client.errors import MemserveError
from serve_app.schemas import Identifier, MemoryType, SpeakerName

INSTRUCTIONS = (
    "Long-term memory of the user. Search before answering questions about the user "
    "(search_memories) or get a ready prompt block (get_context); store durable facts, "
    "preferences and procedures with add_memory. With a service key name the user in "
    "user_id; a user key is bound to its user and may omit it."
)

UserId = Annotated[
    Identifier | None,
    Field(description="whose memories; required with a service key, omitted with a user key"),
]
AgentId = Annotated[Identifier | None, Field(description="agent scope (optional)")]
SessionId = Annotated[Identifier | None, Field(description="session scope (optional)")]
ReferenceDate = Annotated[
    date | None,
    Field(description="the day the message is said; 'last week' is read against it (today)"),
]


class ConversationMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: Annotated[str, Field(min_length=1)]
    name: Annotated[SpeakerName | None, Field(description="who said it")] = None
    speaker_id: Annotated[
        Identifier | None, Field(description="the platform user who said it (group chats)")
    ] = None


class Connector(Protocol):
    """How tool calls reach the API, and with which key."""

    def client(self, ctx: Context) -> AbstractAsyncContextManager[AsyncMemserveClient]:
        """A client carrying the caller's key, for one tool call."""
        ...

    async def may_name_users(self, ctx: Context) -> bool:
        """True for service (and admin) keys: they act for any user of their tenant."""
        ...


def _clean(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class _ApiErrors:
    """Turns an API error answer into a tool error the agent can read and act on."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, MemserveError):
            raise ToolError(f"{exc.code} ({exc.status}): {exc.message}") from None
        return False


def build_server(connector: Connector) -> MCPServer:
    """The MCP server with memserve's tools; calls go through ``connector``."""
    server = MCPServer(
        "memserve", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    async def call(ctx: Context, fn: str, *args: Any, **kwargs: Any) -> Any:
        async with connector.client(ctx) as api:
            with _ApiErrors():
                return await getattr(api, fn)(*args, **kwargs)

    @server.tool()
    async def add_memory(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, description="the memory, verbatim")],
        user_id: UserId = None,
        type: Annotated[MemoryType, Field(description="kind of memory")] = MemoryType.semantic,
        tags: Annotated[list[str] | None, Field(description="labels to filter by")] = None,
        importance: Annotated[float | None, Field(ge=0.0, le=1.0)] = None,
        agent_id: AgentId = None,
        session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Store one memory (a fact, preference or procedure worth keeping) for the user."""
        fields = _clean(tags=tags, importance=importance, agent_id=agent_id, session_id=session_id)
        memory = await call(ctx, "add", content, user_id=user_id, type=type.value, **fields)
        return memory.model_dump(mode="json")

    @server.tool()
    async def add_conversation(
        ctx: Context,
        session_id: Annotated[Identifier, Field(description="the conversation's id")],
        messages: Annotated[
            list[ConversationMessage],
            Field(min_length=1, description="the new messages, oldest first"),
        ],
        user_id: UserId = None,
        agent_id: AgentId = None,
    ) -> dict[str, Any]:
        """Record messages of a conversation; what is worth remembering is extracted in
        the background. In a group chat give each message who said it: ``name``, and
        ``speaker_id`` for a user of the platform (their own statements go to their own
        memory); messages without them are the user's."""
        sent = [m.model_dump(exclude_none=True) for m in messages]
        options = _clean(agent_id=agent_id)
        accepted = await call(ctx, "add_turns", session_id, sent, user_id=user_id, **options)
        return accepted.model_dump(mode="json")

    @server.tool()
    async def search_memories(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="what to look for")],
        user_id: UserId = None,
        top_k: Annotated[int, Field(ge=1, le=100, description="how many results")] = 10,
        types: Annotated[list[MemoryType] | None, Field(description="only these kinds")] = None,
        tags: Annotated[list[str] | None, Field(description="only memories with these")] = None,
        agent_id: AgentId = None,
        session_id: SessionId = None,
        as_of: Annotated[
            datetime | None, Field(description="what was true at this time (ISO 8601)")
        ] = None,
        reference_date: ReferenceDate = None,
    ) -> dict[str, Any]:
        """The user's memories most relevant to ``query``, best first, each with a score:
        what is true now, or at ``as_of``."""
        options = _clean(
            types=[t.value for t in types] if types else None,
            tags=tags,
            agent_id=agent_id,
            session_id=session_id,
            as_of=as_of.isoformat() if as_of else None,
            reference_date=reference_date.isoformat() if reference_date else None,
        )
        found = await call(ctx, "search", query, user_id=user_id, top_k=top_k, **options)
        return found.model_dump(mode="json")

    @server.tool()
    async def get_context(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="the user's current message")],
        user_id: UserId = None,
        session_id: SessionId = None,
        agent_id: AgentId = None,
        reference_date: ReferenceDate = None,
    ) -> str:
        """A ready-to-use block of what is known about the user that matters for ``query``
        (relevant memories and facts), for the system prompt."""
        options = _clean(
            session_id=session_id,
            agent_id=agent_id,
            reference_date=reference_date.isoformat() if reference_date else None,
        )
        block = await call(ctx, "context", query, user_id=user_id, **options)
        return block.context

    @server.tool()
    async def list_memories(
        ctx: Context,
        user_id: UserId = None,
        type: Annotated[MemoryType | None, Field(description="only this kind")] = None,
        agent_id: AgentId = None,
        session_id: SessionId = None,
        limit: Annotated[int, Field(ge=1, le=200, description="page size")] = 50,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
    ) -> dict[str, Any]:
        """The user's memories, newest first, one page at a time."""
        filters = _clean(
            type=type.value if type else None,
            agent_id=agent_id,
            session_id=session_id,
            limit=limit,
            cursor=cursor,
        )
        page = await call(ctx, "list", user_id=user_id, **filters)
        return page.model_dump(mode="json")

    @server.tool()
    async def delete_memory(
        ctx: Context,
        memory_id: Annotated[UUID, Field(description="id of the memory to delete")],
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Delete one memory of the user by id."""
        await call(ctx, "delete", memory_id, user_id=user_id)
        return {"deleted": str(memory_id)}

    @server.tool()
    async def forget(
        ctx: Context,
        user_id: Annotated[Identifier, Field(description="the user to forget")],
        agent_id: AgentId = None,
        session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Service keys only: delete every memory of a user (or of one agent or session
        of that user), e.g. when the user closes the account."""
        if not await connector.may_name_users(ctx):
            raise ToolError("forget needs a service key; delete single memories with a user key")
        scope = _clean(agent_id=agent_id, session_id=session_id)
        gone = await call(ctx, "delete_scope", user_id=user_id, **scope)
        return gone.model_dump(mode="json")

    return server
