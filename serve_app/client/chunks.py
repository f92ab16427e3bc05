"""An import's records and the requests they travel in.

``POST /v1/import`` is all or nothing per request and bounded (body bytes, records),
so a large export goes in chunks: each memory with its history events (the import
maps them to the memory's new id within one request) and each fact with its other
versions. Used by the client's ``import_all`` and by ``python -m serve_app import``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

CHUNK_BYTES = 512 * 1024  # well under the default 1 MiB body limit
CHUNK_RECORDS = 2000  # under the default MEMSERVE_MAX_IMPORT_RECORDS (5000)

ImportData = str | bytes | Iterable[Mapping[str, Any] | str]


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


def to_lines(data: ImportData) -> list[str]:
    """An export's text (ours or mem0's JSON), or its records as dicts or JSON lines."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if isinstance(data, str):
        return records(data)
    return [r if isinstance(r, str) else json.dumps(r, default=str) for r in data]


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
    """Request bodies of at most ``limit`` bytes and ``max_records`` lines (a group larger
    than that goes alone: the server refuses it with a clear 413)."""
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
