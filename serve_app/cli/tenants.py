"""``python -m serve_app tenant create NAME``: a new tenant and its first admin key.

The key is printed once (only its hash is stored); with it the tenant's admin
creates its service and user keys (``/v1/admin/keys``) and sets its settings
(``/v1/admin/tenant/settings``). The database is MEMSERVE_DATABASE_URL, else the
embedded server of MEMSERVE_DATA_DIR (the one `make run` uses).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import re2

from serve_app.cli import issuers as issuers_cli
from serve_app.settings import get_settings

# A tenant id travels in keys, logs and NOTIFY payloads: plain and short.
NAME = re2.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def add_parsers(sub: Any) -> None:
    tenant = sub.add_parser("tenant", help="manage tenants")
    actions = tenant.add_subparsers(dest="tenant_command", required=True)
    create = actions.add_parser("create", help="create a tenant; print its admin key (once)")
    create.add_argument("name", help="the tenant id (letters, digits, '_', '.', '-')")
    issuers_cli.add_parser(actions)


def main(args: argparse.Namespace) -> None:
    if args.tenant_command == "issuers":
        issuers_cli.main(args)
        return
    if not NAME.match(args.name):
        raise SystemExit(f"invalid tenant name {args.name!r}: 1-64 of A-Z a-z 0-9 _ . -")
    key = asyncio.run(create(args.name))
    if key is None:
        raise SystemExit(f"tenant {args.name!r} exists already")
    print(f"tenant {args.name} created; its admin key (shown once):", file=sys.stderr)
    print(key)


async def create(name: str) -> str | None:
    """Register the tenant and return a new admin key; None when the tenant exists."""
    from serve_app.db.migrations import migrate
    from serve_app.db.pool import open_pool
    from serve_app.db.resolve import resolve_dsn
    from serve_app.store.keys import KeyStore
    from serve_app.store.tenant_settings import TenantStore

    settings = get_settings()
    dsn = resolve_dsn(settings)
    migrate(dsn)
    pool = await open_pool(dsn, settings)
    try:
        if not await TenantStore(pool).create(name):
            return None
        key, _ = await KeyStore(pool).create(name, "admin", name="admin (tenant create)")
        return key
    finally:
        await pool.close()
