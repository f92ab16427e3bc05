"""Who is calling, and whether they may spend more: API key to ``Principal``, then limits.

Order matters for strangers: a cached answer (valid or unknown key) costs nothing;
before the database is asked about an uncached key, the client address must still
have budget for failed lookups, so a flood of random keys is refused in memory
instead of exhausting the connection pool. Known callers are charged in work
units per (key, end user), plus an optional aggregate per key.
"""

from __future__ import annotations

from collections import Counter

from psycopg_pool import AsyncConnectionPool

from serve_app.auth import Principal, bearer_token
from serve_app.db.listener import NotifyListener
from serve_app.errors import ApiError
from serve_app.identity.verifier import Refused, TokenVerifier, looks_like_jwt
from serve_app.ratelimit import RateLimiter, retry_after_header
from serve_app.settings import AuthSettings
from serve_app.store.key_cache import KEYS_CHANNEL, KeyCache
from serve_app.store.keys import KeyStore
from serve_app.tenant_settings import Effective

MAX_END_USER_CHARS = 128


def _too_many(message: str, wait: float) -> ApiError:
    return ApiError(429, "rate_limited", message, headers={"Retry-After": retry_after_header(wait)})


class Authenticator:
    def __init__(
        self,
        keys: KeyStore,
        limiter: RateLimiter,
        *,
        key_limiter: RateLimiter | None = None,
        bad_keys: RateLimiter | None = None,
        stranger_delay_s: float = 0.0,
        tokens: TokenVerifier | None = None,
    ) -> None:
        self.keys = keys
        self.tokens = tokens  # signed tokens of the tenants' trusted issuers (JWT)
        self.stranger_delay_s = stranger_delay_s  # held before an early refusal is sent
        self.limiter = limiter  # per (key, end user)
        self.key_limiter = key_limiter  # aggregate per key (optional)
        self.bad_keys = bad_keys  # failed lookups per client address
        self.refused: Counter[str] = Counter()  # why requests were refused (tests, /metrics)

    async def principal(self, authorization: str | None, client: str | None = None) -> Principal:
        """The caller of a request, or 401/429: every stranger is charged to its address.

        A missing or malformed header, a key remembered as unknown and a key the
        database does not know all spend the address's failed-lookup budget; once it
        is spent the answer is 429 without a lookup (valid cached keys still pass).
        """
        address = client or "unknown"
        try:
            token = bearer_token(authorization)
        except ApiError as refusal:
            self._guard(address)
            raise self._stranger(address, "no_key", refusal.message) from None
        if self.tokens is not None and looks_like_jwt(token):
            try:
                return await self.tokens.verify(token, lambda: self._guard(address))
            except Refused as exc:  # charged and held like an unknown key
                self.refused[f"token_{exc.reason}"] += 1
                raise self._stranger(address, "bad_token", "invalid or untrusted token") from None
        row = await self.keys.lookup(token, lambda: self._guard(address))
        if row is None:
            raise self._stranger(address, "unknown_key", "invalid or revoked API key")
        return Principal(
            str(row["id"]),
            row["tenant_id"],
            row["role"],
            row["user_id"],
            row.get("rate_limit_per_s"),
        )

    def failed_lookup_guard(self, address: str | None) -> None:
        """429 before a public lookup when the address's failed-lookup budget is spent."""
        self._guard(address or "unknown")

    def failed_lookup(self, address: str | None) -> None:
        """A public lookup that found nothing (a tenant with no sign-in to show): charged
        to the address's failed-lookup budget like an unknown key, 429 once it is spent,
        so strangers cannot make the service look up names for free."""
        if self.bad_keys is not None:
            self.bad_keys.acquire(address or "unknown")

    def _guard(self, address: str) -> None:
        """429 when ``address`` has no failed-lookup budget left."""
        if self.bad_keys is not None and (wait := self.bad_keys.wait(address)) > 0:
            self.refused["bad_key_flood"] += 1
            raise _too_many("too many invalid API keys from this address; retry later", wait)

    def _stranger(self, address: str, reason: str, message: str) -> ApiError:
        """The 401 for a request without a valid key, charged to the address."""
        if self.bad_keys is not None:
            self.bad_keys.acquire(address)
        self.refused[reason] += 1
        return ApiError(401, "unauthorized", message)

    def charge(
        self, caller: Principal, end_user: str | None, units: float, tenant: Effective | None = None
    ) -> None:
        """Spend ``units`` of work for ``end_user`` (a user key: its own user), or 429.

        Rates: the key's own, else its ``tenant``'s settings (which default to the env's)."""
        user = caller.user_id if caller.role == "user" else end_user
        # The tenant first: a key id is unique, but a token's "key" is its issuer, which
        # two tenants may share (other audiences): one tenant's calls must never drain
        # another's bucket.
        bucket = f"{caller.tenant_id}\x00{caller.key_id}\x00{(user or '')[:MAX_END_USER_CHARS]}"
        rate = caller.rate_limit_per_s
        if rate is None and tenant is not None:
            rate = tenant.rate_per_user
        wait = self.limiter.acquire(bucket, rate, units)
        if wait > 0:
            self.refused["user_rate"] += 1
            raise _too_many("too many requests for this user of the API key; retry later", wait)
        if self.key_limiter is not None:
            per_key = tenant.rate_per_key if tenant is not None else None
            # A user key serves one user; a token's issuer serves many, each its own "key".
            whose = bucket if caller.role == "user" else f"{caller.tenant_id}\x00{caller.key_id}"
            wait = self.key_limiter.acquire(whose, per_key, units)
            if wait > 0:
                self.refused["key_rate"] += 1
                raise _too_many("too many requests for this API key; retry later", wait)


def key_store(
    pool: AsyncConnectionPool, dsn: str, s: AuthSettings
) -> tuple[KeyStore, NotifyListener]:
    """The key store with its cache, kept honest by a started revocation listener."""
    cache = KeyCache(s.cache_ttl_s, s.cache_max_keys, negative_ttl_s=s.negative_ttl_s)
    listener = NotifyListener(
        dsn,
        KEYS_CHANNEL,
        cache.drop,
        on_connect=cache.clear,
        ping_s=s.listener_ping_s,
        stale_s=s.listener_stale_s,
    )
    cache.trusted = listener.healthy
    listener.start()
    return KeyStore(pool, cache), listener


def authenticator(
    keys: KeyStore, s: AuthSettings, tokens: TokenVerifier | None = None
) -> Authenticator:
    """The replica's authenticator with its three kinds of buckets from the settings."""
    bounded = {"max_keys": s.rate_limit_max_keys}
    key_burst = s.key_rate_limit_burst or int(2 * s.key_rate_limit_per_s)
    return Authenticator(
        keys,
        RateLimiter(s.rate_limit_per_s, s.rate_limit_burst, **bounded),
        # Always there (rate 0: off, free): a tenant's settings may turn it on.
        key_limiter=RateLimiter(s.key_rate_limit_per_s, key_burst, **bounded),
        bad_keys=(
            RateLimiter(s.bad_key_per_s, s.bad_key_burst, **bounded)
            if s.bad_key_per_s > 0
            else None
        ),
        stranger_delay_s=s.stranger_delay_s,
        tokens=tokens,
    )
