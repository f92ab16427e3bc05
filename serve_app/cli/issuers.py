"""``python -m serve_app tenant issuers NAME [--add JSON | --remove ISSUER]``: a tenant's
trusted token issuers from the operator's shell (docs/identity.md).

The same change as the admin API's settings PATCH of ``identity.issuers`` (validated
the same way, recorded in the settings history as ``cli``, reaching every replica by
NOTIFY). Without an option it prints the tenant's issuers as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from serve_app.settings import get_settings


def add_parser(actions: Any) -> None:
    issuers = actions.add_parser("issuers", help="list, add or remove trusted token issuers")
    issuers.add_argument("name", help="the tenant id")
    change = issuers.add_mutually_exclusive_group()
    change.add_argument(
        "--add",
        metavar="JSON",
        help='an issuer: {"issuer": "https://…",'
        ' "audiences": ["…"], "jwks_url": "https://…/jwks.json"}',
    )
    change.add_argument("--remove", metavar="ISSUER", help="drop every entry of this issuer")


def main(args: Any) -> None:
    entry = None
    if args.add is not None:
        try:
            entry = json.loads(args.add)
        except ValueError as exc:
            raise SystemExit(f"--add is not JSON: {exc}") from None
    try:
        out = asyncio.run(change(args.name, entry, args.remove))
    except ValueError as exc:  # the settings' validation or a taken issuer
        raise SystemExit(str(exc)) from None
    json.dump(out, sys.stdout, indent=1)
    print()


async def change(tenant: str, add: Any, remove: str | None) -> list[dict[str, Any]]:
    """The tenant's issuers after adding ``add`` or removing ``remove`` (neither: as is)."""
    from serve_app.db.migrations import migrate
    from serve_app.db.pool import open_pool
    from serve_app.db.resolve import resolve_dsn
    from serve_app.errors import ApiError
    from serve_app.services.tenants import TenantService
    from serve_app.store.tenants import TenantStore

    settings = get_settings()
    dsn = resolve_dsn(settings)
    migrate(dsn)
    pool = await open_pool(dsn, settings)
    try:
        service = TenantService(TenantStore(pool), settings)
        view = await service.read(tenant)
        issuers = list((view["settings"].get("identity") or {}).get("issuers") or [])
        if add is None and remove is None:
            return issuers
        if remove is not None:
            issuers = [i for i in issuers if i.get("issuer") != remove]
        else:
            issuers.append(add)
        try:
            view = await service.patch(tenant, {"identity": {"issuers": issuers or None}}, None)
        except ApiError as exc:  # 422: the settings' validation, with the field's path
            invalid = exc.code == "invalid_request"
            raise ValueError(f"invalid issuer: {exc.message}" if invalid else exc.message) from None
        return (view["settings"].get("identity") or {}).get("issuers") or []
    finally:
        await pool.close()
