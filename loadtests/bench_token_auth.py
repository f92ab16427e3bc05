"""CPU per authenticated request: a user's token (JWT) against a user API key.

    python -m loadtests.bench_token_auth [--n 3000] [--repeat 3]

What differs between a request with a key and one with a token is the Ingress's
authentication (the stranger gate's ``Authenticator.principal`` and the charge to the
caller's buckets); the rest of the request is the same code. This runs exactly that
code in-process, built the way the composition root builds it, over a real embedded
PostgreSQL (migrated; the tenant's issuer set through the settings service), with a
real local issuer serving its JWKS over HTTP, and measures process CPU per call:

- ``key``: a user key (cached by the key cache, as on every request after the first);
- ``token_repeated``: the same token again (the verified-token cache: a SHA-256);
- ``token_new_<alg>``: a token never seen before, each call (signature check; the JWKS
  cached), for RS256, ES256 and EdDSA: the worst case of a client that mints a token
  per request.

The target (issue 30): a token request at most 0.3 ms CPU dearer than a key request.
Prints the figures and writes loadtests/results/bench_token_auth-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.harness import write_json  # noqa: E402
from serve_app.composition import token_verifier  # noqa: E402
from serve_app.db.embedded import EmbeddedPostgres  # noqa: E402
from serve_app.db.migrations import migrate  # noqa: E402
from serve_app.db.pool import open_pool  # noqa: E402
from serve_app.services.auth import authenticator, key_store  # noqa: E402
from serve_app.services.tenant_settings import tenant_service  # noqa: E402
from serve_app.settings import Settings  # noqa: E402
from serve_app.testing.jwt_issuer import LocalIssuer  # noqa: E402

TARGET_MS = 0.3


async def _cpu_per_call(auth: Any, headers: list[str]) -> float:
    """Process CPU (ms) per authenticated call, over ``headers`` in order."""
    start = time.process_time()
    for header in headers:
        caller = await auth.principal(header, "10.0.0.1")
        auth.charge(caller, None, 1.0)
    return (time.process_time() - start) * 1000 / len(headers)


async def measure(dsn: str, n: int, repeat: int) -> dict[str, Any]:
    settings = Settings(database_url=dsn).with_(
        identity={"allow_private_jwks": True, "verified_cache_max": 10 * n},
        auth={"rate_limit_per_s": 0.0},  # buckets off: no 429 in the loop (same for both)
    )
    issuer = LocalIssuer().start()
    pool = await open_pool(dsn, settings, min_size=1)
    keys, key_listener = key_store(pool, dsn, settings.auth)
    tenants, tenant_listener = tenant_service(pool, dsn, settings)
    tokens = token_verifier(pool, tenants, settings.identity)
    auth = authenticator(keys, settings.auth, tokens)
    try:
        audience = "bench"
        await tenants.patch("bench", {"identity": {"issuers": [issuer.config(audience)]}}, None)
        key, _ = await keys.create("bench", "user", "alice")
        for _ in range(200):  # the caches are trusted once the listeners are up
            if key_listener.healthy() and tenant_listener.healthy():
                break
            await asyncio.sleep(0.05)
        same = issuer.token("alice", audience)
        for header in (f"Bearer {key}", f"Bearer {same}"):  # warm: cached key, JWKS, token
            await auth.principal(header, "10.0.0.1")
        runs: dict[str, list[float]] = {}
        for _ in range(repeat):
            runs.setdefault("key", []).append(await _cpu_per_call(auth, [f"Bearer {key}"] * n))
            runs.setdefault("token_repeated", []).append(
                await _cpu_per_call(auth, [f"Bearer {same}"] * n)
            )
            for alg in ("RS256", "ES256", "EdDSA"):
                fresh = [  # distinct tokens (a jti each), minted before the clock starts
                    f"Bearer {issuer.token('alice', audience, alg=alg, jti=secrets.token_hex(8))}"
                    for _ in range(n)
                ]
                runs.setdefault(f"token_new_{alg}", []).append(await _cpu_per_call(auth, fresh))
        assert tokens.jwks.fetches == 1, "the JWKS is fetched once and then cached"
    finally:
        await tokens.jwks.fetcher.aclose()
        await key_listener.stop()
        await tenant_listener.stop()
        await pool.close()
        issuer.stop()
    medians = {name: statistics.median(v) for name, v in runs.items()}
    key_ms = medians["key"]
    return {
        "n_per_run": n,
        "repeat": repeat,
        "cpu_ms_per_request_median": {k: round(v, 4) for k, v in medians.items()},
        "cpu_ms_per_request_runs": {k: [round(x, 4) for x in v] for k, v in runs.items()},
        "extra_cpu_ms_vs_key": {k: round(v - key_ms, 4) for k, v in medians.items() if k != "key"},
        "target_extra_ms": TARGET_MS,
        "jwks_fetches": 1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000, help="calls per case and run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memserve-tokbench-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            migrate(dsn)
            result = asyncio.run(measure(dsn, args.n, args.repeat))
        finally:
            server.stop()
    for name, ms in result["cpu_ms_per_request_median"].items():
        extra = result["extra_cpu_ms_vs_key"].get(name)
        more = "" if extra is None else f"  ({extra * 1000:+7.1f} us vs key)"
        print(f"{name:<18} {ms * 1000:8.1f} us CPU per request{more}")
    worst = max(result["extra_cpu_ms_vs_key"].values())
    print(f"worst extra CPU vs a key: {worst:.3f} ms (target <= {TARGET_MS} ms)")
    print(f"wrote {write_json('bench_token_auth', result)}")


if __name__ == "__main__":
    main()
