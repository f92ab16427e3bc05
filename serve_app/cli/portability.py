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
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

CHUNK_BYTES = 512 * 1024  # well under the default 1 MiB body limit
CHUNK_RECORDS = 2000  # under the default MEMSERVE_MAX_IMPORT_RECORDS (5000)


def add_parsers(sub: Any) -> None:
    for name, text in (("export", "write a user's memories, facts and history as JSON Lines"),
                       ("import", "load an export (ours or mem0's) into a user")):  # fmt: skip
        p = sub.add_parser(name, help=text)
        p.add_argument("--url", default=os.environ.get("MEMSERVE_URL", "http://127.0.0.1:8000"))
        p.add_argument("--key", default=os.environ.get("MEMSERVE_API_KEY"),
                       help="API key (default: $MEMSERVE_API_KEY)")  # fmt: skip
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


def records(text: str) -> list[str]:
    """One JSON record per line: a single JSON document (mem0) is split into its records."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            whole = json.loads(stripped)
        except ValueError:
            whole = None  # JSON Lines
        if isinstance(whole, dict) and isinstance(whole.get("results"), list):
            whole = whole["results"]
        if isinstance(whole, list):
            return [json.dumps(r) for r in whole]
        if isinstance(whole, dict):
            return [json.dumps(whole)]
    return [line for line in text.splitlines() if line.strip()]


def groups(lines: list[str]) -> list[list[str]]:
    """Lines that must go in one request: a memory and its history events (the import
    attributes them to the memory's new id), a fact's versions; anything else alone."""
    out: list[list[str]] = []
    by_key: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None  # the server names the bad line
        if not isinstance(record, dict):
            out.append([line])
            continue
        kind = record.get("kind")
        if kind == "memory" and record.get("id"):
            by_key[("memory", str(record["id"]))] = group = [line]
            out.append(group)
        elif kind == "history" and ("memory", str(record.get("memory_id"))) in by_key:
            by_key[("memory", str(record.get("memory_id")))].append(line)
        elif kind == "fact":
            key = ("fact", f"{record.get('category')}/{record.get('key')}")
            if key not in by_key:
                by_key[key] = []
                out.append(by_key[key])
            by_key[key].append(line)
        else:
            out.append([line])
    return out


def chunks(lines: list[str], limit: int, max_records: int = CHUNK_RECORDS) -> Iterator[str]:
    batch: list[str] = []
    size = 0
    for group in groups(lines):
        n = sum(len(line.encode()) + 1 for line in group)
        if batch and (size + n > limit or len(batch) + len(group) > max_records):
            yield "\n".join(batch) + "\n"
            batch, size = [], 0
        batch.extend(group)
        size += n
    if batch:
        yield "\n".join(batch) + "\n"


def import_(client: httpx.Client, params: dict[str, str], text: str, limit: int) -> dict:
    total: dict[str, Any] = {"memories": 0, "facts": 0, "chunks": 0}
    for body in chunks(records(text), limit):
        r = client.post(
            "/v1/import", params=params, content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )  # fmt: skip
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
