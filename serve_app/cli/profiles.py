"""``python -m serve_app classify-profiles``: today's profile rule on memories written before it.

After an upgrade that changes the profile rule (learned weights, its bar), a memory keeps
the class it was written with until it is written again. This walks the tenant's users
(``GET /v1/users``, or ``--user`` for one) and calls ``POST /v1/admin/profile/classify``
for each until its cursor runs out, printing one JSON line per user (examined, classified)
and the totals on stderr. An admin key; safe to run again (it only adds classes).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from serve_app.cli import add_service_args
from serve_app.client import MemserveClient
from serve_app.client.errors import MemserveError

MAX_USER_PAGES = 100_000  # pages of GET /v1/users one run reads (each up to --page users)
MAX_CALLS_PER_USER = 10_000  # classify calls for one user (each a server-bounded page)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("classify-profiles", help="apply today's profile rule to older memories")
    add_service_args(p, "an admin key")
    p.add_argument("--user", default=None, help="one user (default: every user of the tenant)")
    p.add_argument("--page", type=int, default=200, help="users listed per request (1..1000)")


def users(client: MemserveClient, page: int) -> Iterator[str]:
    """Every user of the key's tenant, a page at a time."""
    cursor = None
    for _ in range(MAX_USER_PAGES):
        listed = client.users(limit=page, cursor=cursor)
        yield from (u.user_id for u in listed.users)
        cursor = listed.next_cursor
        if cursor is None:
            return


def classify(client: MemserveClient, user_id: str) -> dict[str, Any]:
    """One user's memories without a class or a pin, every page of them."""
    out = {"user_id": user_id, "examined": 0, "classified": 0}
    after = None
    for _ in range(MAX_CALLS_PER_USER):
        run = client.classify_profile(user_id, after=after)
        out["examined"] += run.examined
        out["classified"] += run.classified
        after = run.next
        if after is None:
            break
    return out


def main(args: argparse.Namespace) -> None:
    if not args.key:
        raise SystemExit("an admin key is required (--key or MEMSERVE_API_KEY)")
    totals = {"users": 0, "examined": 0, "classified": 0}
    try:
        with MemserveClient(args.url, args.key) as client:
            for user_id in [args.user] if args.user else users(client, args.page):
                done = classify(client, user_id)
                print(json.dumps(done), flush=True)
                totals["users"] += 1
                totals["examined"] += done["examined"]
                totals["classified"] += done["classified"]
    except MemserveError as exc:  # users done so far are printed; a run again resumes
        raise SystemExit(f"classify-profiles: {exc} (after {totals['users']} users)") from None
    finally:
        print(json.dumps(totals), file=sys.stderr)
