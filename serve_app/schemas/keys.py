"""Bodies of the admin API keys routes: create, list, the key shown once."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field

from serve_app.ratelimit import MIN_RATE_PER_S
from serve_app.schemas.memories import Identifier, StrictModel

__all__ = ["ApiKeyCreate", "ApiKeyCreated", "ApiKeyInfo", "ApiKeyList"]


class ApiKeyCreate(StrictModel):
    role: Literal["service", "user"]
    user_id: Identifier | None = None
    name: str | None = Field(default=None, min_length=1, max_length=128)
    rate_limit_per_s: float | None = Field(default=None, ge=MIN_RATE_PER_S, le=1_000_000)


class ApiKeyInfo(BaseModel):
    id: UUID
    tenant_id: str
    role: str
    user_id: str | None
    prefix: str
    name: str | None
    rate_limit_per_s: float | None = None
    created_at: datetime
    revoked_at: datetime | None


class ApiKeyCreated(ApiKeyInfo):
    key: str  # shown once


class ApiKeyList(BaseModel):
    keys: list[ApiKeyInfo]
