"""``python -m serve_app events``: read the event feed as JSON Lines (one event a line).

Pages through ``GET /v1/events`` from ``--after`` (default: the oldest kept) and prints
each event; the cursor to resume from goes to stderr at the end. ``--follow`` keeps
polling every ``--interval`` seconds until interrupted, as a consumer would.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from serve_app.cli import add_service_args
from serve_app.client import MemserveClient

MAX_PAGES = 10_000  # pages read by one run without --follow (each up to --limit events)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("events", help="print the event feed as JSON Lines")
    add_service_args(p, "API key")
    p.add_argument("--after", default=None, help="a cursor printed by an earlier run")
    p.add_argument("--types", default=None, help="comma-separated event types")
    p.add_argument("--user", default=None, help="one user's events")
    p.add_argument("--limit", type=int, default=100, help="events per page (1..500)")
    p.add_argument("--content", action="store_true", help="include memory and fact text")
    p.add_argument("--follow", action="store_true", help="keep polling for new events")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls")


def main(args: argparse.Namespace) -> None:
    if not args.key:
        raise SystemExit("an API key is required (--key or MEMSERVE_API_KEY)")
    types = [t for t in (args.types or "").split(",") if t] or None
    cursor = args.after
    with MemserveClient(args.url, args.key) as client:
        try:
            pages = 0
            while args.follow or pages < MAX_PAGES:
                page = client.events(
                    after=cursor,
                    types=types,
                    user_id=args.user,
                    limit=args.limit,
                    include_content=args.content or None,
                )
                pages += 1
                for event in page.events:
                    print(json.dumps(event.model_dump(mode="json", exclude_none=True)))
                sys.stdout.flush()
                cursor = page.next_cursor
                if not page.events:
                    if not args.follow:
                        break
                    time.sleep(args.interval)
        except KeyboardInterrupt:
            pass
        finally:
            print(f"next cursor: {cursor}", file=sys.stderr)
