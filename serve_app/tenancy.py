"""A tenant's own settings: the validated document and how it meets the environment.

The stored document holds overrides only: a field that is absent (or PATCHed to
null) takes the environment's value (serve_app/settings/), so an operator's new
default reaches every tenant that did not choose otherwise. Writes validate the
whole document strictly (wrong types, unknown fields, out-of-range values: 422);
:func:`resolve` merges it over the environment into :class:`Effective`, the
values consumers read (quotas, retention, rate limits, chat models, extraction
guidance). Changes are JSON merge patches (RFC 7386): objects merge, lists and
values replace, null removes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from serve_app.identity.issuers import Identity, Issuer
from serve_app.ratelimit import MIN_RATE_PER_S
from serve_app.schemas import MemoryType
from serve_app.settings import Settings
from serve_app.store.llm_spend import GROUPS, Limits
from serve_app.store.quota import Quota

MAX_COUNT = 1_000_000_000
MAX_TTL_S = 10 * 365 * 86400
MAX_RATE = 1_000_000.0
MAX_CATEGORIES = 64
_PRINTABLE = r"^[^\x00-\x1f\x7f]+$"  # one line, no control characters

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Tokens = Annotated[int, Field(ge=0, le=10**15)]
Ttl = Annotated[float, Field(ge=0, le=MAX_TTL_S)]


def _rate_floor(value: float) -> float:
    """0 (off) or at least the floor API keys have: a tenant's 1e-300 locked every key
    out for good, and 5e-324 made each refusal's Retry-After infinite (a 500)."""
    if 0 < value < MIN_RATE_PER_S:
        raise ValueError(f"a rate is 0 (off) or at least {MIN_RATE_PER_S} units per second")
    return value


Rate = Annotated[float, Field(ge=0, le=MAX_RATE), AfterValidator(_rate_floor)]
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=_PRINTABLE)]
CategoryName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=_PRINTABLE)]
Text = Annotated[str, StringConstraints(max_length=4000, pattern=r"^[^\x00]*$")]


class _Group(BaseModel):
    # strict: "5" is not 5 and true is not 1; a typo'd field is an error, not ignored.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Quotas(_Group):
    """Maximum memories and active facts (distinct keys); 0: unlimited."""

    max_memories_per_user: Count | None = None
    max_memories_per_tenant: Count | None = None
    max_facts_per_user: Count | None = None
    max_facts_per_tenant: Count | None = None


class Retention(_Group):
    """Seconds a new memory of each type lives when its write names no expiry; 0: kept."""

    semantic: Ttl | None = None
    fact: Ttl | None = None
    preference: Ttl | None = None
    procedural: Ttl | None = None
    episodic: Ttl | None = None
    insight: Ttl | None = None


class RateLimits(_Group):
    """Work units per second (serve_app/ratelimit.py); 0: off. A key's own rate still wins."""

    per_user_per_s: Rate | None = None  # each (API key, end user)
    per_key_per_s: Rate | None = None  # all end users of one key together


class Guidance(_Group):
    """mem0's names: free-text instructions, what to include and exclude, and the
    categories (``[{"name": "description"}, ...]``) memories are tagged with."""

    custom_instructions: Text | None = None
    includes: Text | None = None
    excludes: Text | None = None
    custom_categories: (
        list[dict[CategoryName, Annotated[str, StringConstraints(max_length=500)]]] | None
    ) = Field(default=None, max_length=MAX_CATEGORIES)

    @field_validator("custom_categories")
    @classmethod
    def _one_name_each(cls, value: list[dict[str, str]] | None) -> list[dict[str, str]] | None:
        if value is None:
            return None
        names: set[str] = set()
        for entry in value:
            if len(entry) != 1:
                raise ValueError('each category is one {"name": "description"} pair')
            name = next(iter(entry)).strip().lower()
            if name in names:
                raise ValueError(f"category {name!r} is listed twice")
            names.add(name)
        return value


class BudgetLimits(_Group):
    """Tokens (prompt + completion) per UTC day / calendar month; 0: no budget."""

    tenant_daily: Tokens | None = None
    tenant_monthly: Tokens | None = None
    user_daily: Tokens | None = None  # each end user of the tenant


class Budgets(_Group):
    """LLM token budgets: over ``background``, extraction and the other background
    calls are deferred (turns stay queued); over ``chat``, the chat proxy answers 429 and
    a request's LLM ``rerank`` keeps the search order."""

    background: BudgetLimits = Field(default_factory=BudgetLimits)
    chat: BudgetLimits = Field(default_factory=BudgetLimits)


class Rerank(_Group):
    """The re-scoring back-ends this tenant's requests may use: the operator's
    (``MEMSERVE_RERANK_BACKENDS``) narrowed; one the operator does not offer stays off."""

    backends: list[Literal["onnx", "llm"]] | None = Field(default=None, max_length=2)


class TenantSettings(_Group):
    """The document ``/v1/admin/tenant/settings`` reads and writes."""

    quotas: Quotas = Field(default_factory=Quotas)
    retention: Retention = Field(default_factory=Retention)
    rate_limits: RateLimits = Field(default_factory=RateLimits)
    chat_models: list[ModelName] | None = Field(default=None, min_length=1, max_length=64)
    extraction: Guidance = Field(default_factory=Guidance)
    budgets: Budgets = Field(default_factory=Budgets)
    identity: Identity = Field(default_factory=Identity)  # trusted token issuers (JWT)
    rerank: Rerank = Field(default_factory=Rerank)


def canonical(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` validated (raises pydantic's ``ValidationError``) and stripped to what it sets."""
    return TenantSettings.model_validate(doc).model_dump(
        mode="json", exclude_none=True, exclude_defaults=True
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def changes(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """The leaves that differ between two documents: ``[{"field", "old", "new"}]``."""
    if isinstance(old, dict | None) and isinstance(new, dict | None) and (old or new):
        old, new = old or {}, new or {}  # a group that appears or goes: its leaves
        out: list[dict[str, Any]] = []
        for key in sorted(old.keys() | new.keys()):
            out += changes(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if old == new else [{"field": path, "old": old, "new": new}]


def environment(settings: Settings, chat_models: Iterable[str] = ()) -> dict[str, Any]:
    """The environment's values as a full document (what a tenant without overrides gets);
    ``chat_models``: the proxy's allow-list (serve_app/services/chat_caps.py parses it)."""
    q, auth, x = settings.quota, settings.auth, settings.extract
    unknown = set(settings.lifecycle.retention_s) - {t.value for t in MemoryType}
    if unknown:
        raise ValueError(f"MEMSERVE_LIFECYCLE_RETENTION_S names unknown types {sorted(unknown)}")
    return {
        "quotas": {
            "max_memories_per_user": q.max_memories_per_user,
            "max_memories_per_tenant": q.max_memories_per_tenant,
            "max_facts_per_user": q.max_facts_per_user,
            "max_facts_per_tenant": q.max_facts_per_tenant,
        },
        "retention": {
            t.value: settings.lifecycle.retention_s.get(t.value, 0.0) for t in MemoryType
        },
        "rate_limits": {
            "per_user_per_s": auth.rate_limit_per_s,
            "per_key_per_s": auth.key_rate_limit_per_s,
        },
        "chat_models": sorted(chat_models) or None,
        "extraction": {
            "custom_instructions": x.custom_instructions,
            "includes": x.includes,
            "excludes": x.excludes,
            "custom_categories": [{k: v} for k, v in x.custom_categories.items()],
        },
        "budgets": {
            g: {
                scope: getattr(settings.spend, f"{g}_{scope}")
                for scope in ("tenant_daily", "tenant_monthly", "user_daily")
            }
            for g in GROUPS
        },
        "identity": {},  # issuers are the tenant's own: the environment names none
        "rerank": {"backends": list(settings.rerank.backends)},
    }


@dataclass(frozen=True)
class ExtractionGuidance:
    """What the extraction prompt is told on top of its contract; empty: nothing."""

    instructions: str = ""
    includes: str = ""
    excludes: str = ""
    categories: tuple[tuple[str, str], ...] = ()  # (name, description), in the given order

    @staticmethod
    def categories_of(entries: Iterable[Mapping[str, str]]) -> tuple[tuple[str, str], ...]:
        """mem0's ``[{"name": "description"}]`` as (name, description) pairs."""
        return tuple((str(k).strip(), str(v)) for e in entries for k, v in e.items())

    def pick(self, tags: Iterable[str]) -> list[str]:
        """An LLM's tags kept only where they name a category (its spelling), when any."""
        if not self.categories:
            return list(tags)
        names = {name.lower(): name for name, _ in self.categories}
        return list(dict.fromkeys(names[t.lower()] for t in tags if t.lower() in names))


@dataclass(frozen=True)
class Effective:
    """A tenant's settings merged over the environment: what every consumer reads."""

    memory_quota: Quota
    fact_quota: Quota
    retention_s: Mapping[str, float]  # memory type -> seconds; only types that expire
    rate_per_user: float  # 0: off
    rate_per_key: float  # 0: off
    chat_models: frozenset[str]
    guidance: ExtractionGuidance
    budgets: Mapping[str, Limits] = field(default_factory=dict)  # group -> its budgets
    issuers: tuple[Issuer, ...] = ()  # trusted token issuers (serve_app/identity/)
    rerank_backends: frozenset[str] = frozenset()  # what its requests' ``rerank`` may use

    def expires_at(self, memory_type: str, now: datetime | None = None) -> datetime | None:
        """When a new memory of this type expires by default (None: never)."""
        ttl = self.retention_s.get(memory_type)
        return (now or datetime.now(UTC)) + timedelta(seconds=ttl) if ttl else None


def resolve(overrides: Mapping[str, Any], env: Mapping[str, Any]) -> Effective:
    """The effective settings: ``overrides`` (a stored, canonical document) over ``env``
    (:func:`environment`)."""
    doc = TenantSettings.model_validate(merge_patch(dict(env), dict(overrides)))
    q, g = doc.quotas, doc.extraction
    return Effective(
        memory_quota=Quota(q.max_memories_per_user or None, q.max_memories_per_tenant or None),
        fact_quota=Quota(q.max_facts_per_user or None, q.max_facts_per_tenant or None),
        retention_s={k: v for k, v in doc.retention.model_dump().items() if v},
        rate_per_user=doc.rate_limits.per_user_per_s or 0.0,
        rate_per_key=doc.rate_limits.per_key_per_s or 0.0,
        chat_models=frozenset(doc.chat_models or ()),
        guidance=ExtractionGuidance(
            g.custom_instructions or "",
            g.includes or "",
            g.excludes or "",
            ExtractionGuidance.categories_of(g.custom_categories or ()),
        ),
        budgets={
            name: Limits(b.tenant_daily or 0, b.tenant_monthly or 0, b.user_daily or 0)
            for name, b in (("background", doc.budgets.background), ("chat", doc.budgets.chat))
        },
        issuers=tuple(doc.identity.issuers or ()),
        rerank_backends=frozenset(doc.rerank.backends or ()),
    )
