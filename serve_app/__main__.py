"""Command line: `python -m serve_app COMMAND`, COMMAND one of run, migrate, create-key,
tenant, usage, stop-db, mcp, export, import, events, classify-profiles."""

from __future__ import annotations

import argparse
import asyncio

from serve_app.cli import events as events_cli
from serve_app.cli import keys as keys_cli
from serve_app.cli import portability as portability_cli
from serve_app.cli import profiles as profiles_cli
from serve_app.cli import tenants as tenants_cli
from serve_app.cli import usage as usage_cli
from serve_app.mcp import stdio as mcp_cli
from serve_app.settings import get_settings


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m serve_app")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="start Postgres (embedded unless a DSN is set), Ray and the app")
    sub.add_parser("migrate", help="apply schema migrations to MEMSERVE_DATABASE_URL")
    sub.add_parser("stop-db", help="stop the embedded PostgreSQL left running by `serve run`")
    key = sub.add_parser("create-key", help="create an API key (printed once)")
    key.add_argument("--tenant", default=None)
    key.add_argument("--role", choices=["admin", "service", "user"], default="service")
    key.add_argument("--user-id", default=None)
    mcp_cli.add_parser(sub)
    portability_cli.add_parsers(sub)
    tenants_cli.add_parsers(sub)
    usage_cli.add_parsers(sub)
    events_cli.add_parser(sub)
    profiles_cli.add_parser(sub)
    args = parser.parse_args()

    if args.command == "run":
        from serve_app.launcher import run

        run()
    elif args.command == "migrate":
        from serve_app.db.migrations import migrate

        print("applied:", migrate(_dsn()) or "nothing (up to date)")
    elif args.command == "stop-db":
        from serve_app.db.resolve import stop_embedded

        stopped = stop_embedded(get_settings().data_dir)
        print("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")
    elif args.command == "create-key":
        keys_cli.check(args.role, args.user_id)  # the API's rules, before anything is written
        print(asyncio.run(_create_key(args.tenant, args.role, args.user_id)))
    elif args.command == "mcp":
        mcp_cli.main(args)
    elif args.command in ("export", "import"):
        portability_cli.main(args)
    elif args.command == "tenant":
        tenants_cli.main(args)
    elif args.command == "usage":
        usage_cli.main(args)
    elif args.command == "events":
        events_cli.main(args)
    elif args.command == "classify-profiles":
        profiles_cli.main(args)


def _dsn() -> str:
    dsn = get_settings().database_url
    if not dsn:
        raise SystemExit("MEMSERVE_DATABASE_URL is required for this command")
    return dsn


async def _create_key(tenant: str | None, role: str, user_id: str | None) -> str:
    from serve_app.db.pool import open_pool
    from serve_app.store.keys import KeyStore

    settings = get_settings()
    pool = await open_pool(_dsn(), settings)
    try:
        key, _ = await KeyStore(pool).create(tenant or settings.default_tenant, role, user_id)
        return key
    finally:
        await pool.close()


if __name__ == "__main__":
    main()
