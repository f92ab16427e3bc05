"""mem0-compatible routes under ``/mem0``: the official ``mem0ai`` ``MemoryClient`` works
against memserve by setting ``host="<memserve>/mem0"`` (``Authorization: Token <key>``).

An adapter over the same services as ``/v1``, with memserve's isolation rules.
"""

from __future__ import annotations

from fastapi import APIRouter

from serve_app.api.mem0 import entities, memories

router = APIRouter(prefix="/mem0")
router.include_router(entities.router)
router.include_router(memories.router)
