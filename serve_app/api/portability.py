"""GET /v1/export and POST /v1/import: one user's data out as JSON Lines, and back in."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from serve_app.api.deps import Caller, Svc
from serve_app.api.memories import UserQuery
from serve_app.auth import resolve_owner
from serve_app.errors import ApiError
from serve_app.responses import ImportReport
from serve_app.services.portability import parse

router = APIRouter(prefix="/v1", tags=["portability"])

NDJSON = "application/x-ndjson"


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {}}, "description": "JSON Lines"}},
)
async def export(caller: Caller, services: Svc, user_id: UserQuery = None):
    """The user's memories, facts and history as JSON Lines (``header`` first, ``end``
    last with the counts: a stream without it was cut short)."""
    owner = resolve_owner(caller, user_id)
    filename = f"memserve-{owner.user_id}.jsonl"
    return StreamingResponse(
        services.portability.export(owner),
        media_type=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.post("/import", response_model=ImportReport)
async def import_(request: Request, caller: Caller, services: Svc, user_id: UserQuery = None):
    """Load an export (ours, or mem0's ``get_all`` output) into the user, all or nothing:
    every record is validated first (a bad one is a 422 naming its line), then memories
    (re-embedded, with their scope, expiry, status, timestamps, validity and history)
    and facts (every version) are written in one transaction; a quota (403) or a running
    forget (409) writes nothing either. At most ``MEMSERVE_MAX_IMPORT_RECORDS`` records
    per call (413 beyond; the CLI splits larger files); charged one unit per record."""
    owner = resolve_owner(caller, user_id)
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "invalid_request", "the body must be UTF-8 JSON") from exc
    portability = services.portability
    batch = await asyncio.to_thread(parse, text, portability.max_records)  # off the loop
    services.auth.charge(caller, owner.user_id, batch.records)
    return await portability.load(owner, batch, caller.actor)
