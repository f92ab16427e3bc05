"""``python -m serve_app export|import``: one user's data out of, or into, a running service.

Export streams ``GET /v1/export`` to a file (or stdout). Import reads our JSON Lines or
mem0's ``get_all`` output and posts it to ``POST /v1/import`` in chunks under the body
limit and the per-request record limit; each memory travels with its history events and
each fact with its other versions. Each chunk is all or nothing; the first failing chunk
stops the run (the ones before it stay imported, as the summary says).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from serve_app.cli import add_service_args
from serve_app.client.chunks import CHUNK_BYTES, chunks, groups, records

__all__ = ["add_parsers", "chunks", "groups", "main"]


def add_parsers(sub: Any) -> None:
    for name, text in (
        ("export", "write a user's memories, facts and history as JSON Lines"),
        ("import", "load an export (ours or mem0's) into a user"),
    ):
        p = sub.add_parser(name, help=text)
        add_service_args(p, "API key")
        p.add_argument("--user", default=None, help="user id (required with a service key)")
        if name == "export":
            p.add_argument("--out", default="-", help="file to write (default: stdout)")
        else:
            p.add_argument("file", help="JSON Lines export, or mem0 JSON ('-': stdin)")
            p.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)


def main(args: argparse.Namespace) -> None:
    if not args.key:
        raise SystemExit("an API key is required (--key or MEMSERVE_API_KEY)")
    params = {"user_id": args.user} if args.user else {}
    headers = {"Authorization": f"Bearer {args.key}"}
    with httpx.Client(base_url=args.url, headers=headers, timeout=120) as client:
        if args.command == "export":
            export(client, params, args.out)
        else:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
            print(json.dumps(import_(client, params, text, args.chunk_bytes)))


def export(client: httpx.Client, params: dict[str, str], out: str) -> None:
    with client.stream("GET", "/v1/export", params=params) as r:
        _check(r)
        sink = sys.stdout.buffer if out == "-" else open(out, "wb")  # noqa: SIM115
        try:
            for chunk in r.iter_bytes():
                sink.write(chunk)
        finally:
            if sink is not sys.stdout.buffer:
                sink.close()


def import_(client: httpx.Client, params: dict[str, str], text: str, limit: int) -> dict:
    total: dict[str, Any] = {"memories": 0, "facts": 0, "chunks": 0}
    for body in chunks(records(text), limit):
        r = client.post(
            "/v1/import",
            params=params,
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        if r.status_code != 200:
            print(json.dumps({"imported_before_failure": total}), file=sys.stderr)
        _check(r)
        got = r.json()["imported"]
        total["memories"] += got["memories"]
        total["facts"] += got["facts"]
        total["chunks"] += 1
    return total


def _check(r: httpx.Response) -> None:
    if r.status_code >= 400:
        r.read()
        raise SystemExit(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}")
