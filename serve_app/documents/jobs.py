"""A document job's stored form: its chunks as the job row holds them, the job as the
API shows it, and the error of a job that is no longer its worker's."""

from __future__ import annotations

import json
from typing import Any

from serve_app.documents.chunking import Chunk


class JobLost(Exception):
    """The job is no longer this worker's: its lease ran out and another worker took it,
    or a forget or a delete of the document dropped it. Nothing is written."""


def stored_chunks(chunks: list[Chunk]) -> str:
    """Chunks as a job stores them: a JSON array of compact arrays (CPU work in
    proportion to the document: callers run it in a worker thread)."""
    rows = [[c.index, c.text, c.char_start, c.char_end, list(c.heading_path)] for c in chunks]
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":"))


def job_chunks(text: str) -> list[Chunk]:
    """The chunks of a claimed job's ``chunks_json`` (run in a worker thread)."""
    return [
        Chunk(int(i), str(t), int(s), int(e), tuple(h), 0) for i, t, s, e, h in json.loads(text)
    ]


def job_view(row: dict[str, Any]) -> dict[str, Any]:
    """A job as the API shows it (its owner decides who may see it; not shown)."""
    out = {k: v for k, v in row.items() if k != "owner"}
    out["job_id"] = str(row["job_id"])
    return out
