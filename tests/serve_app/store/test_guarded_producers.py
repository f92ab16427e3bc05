"""One write path: only serve_app/store/guarded.py calls the raw writes of the stores, every
producer of memories and facts goes through GuardedWriter, and no module outside the
store writes memory or fact rows with SQL of its own (read by walking the source)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SERVE_APP = Path(__file__).resolve().parents[3] / "serve_app"
GUARDED = SERVE_APP / "store" / "guarded.py"
RAW_WRITES = {"_raw_add", "_raw_update", "_raw_delete", "_raw_delete_scope", "_raw_upsert"}
# Every module that produces memories or facts, and what it writes.
PRODUCERS = {
    "services/memories.py": "API /v1/memories, batch, mem0 and MCP (through the API)",
    "services/ingest_pipeline.py": "a long batch add in chunks (one transaction)",
    "services/facts.py": "API /v1/facts",
    "services/portability.py": "import",
    "extraction/pipeline.py": "extraction: facts, raw turns, summaries",
    "extraction/writer.py": "extraction: dedup, merge, insert",
    "consolidation/job.py": "consolidation: merge, insights, digests",
    "composition.py": "builds the replica's one writer",
}
# SQL that creates memory or fact rows: only the store's statement builders hold it.
ROW_WRITES = re.compile(r"INSERT INTO (memory_items|facts)\b")
ROW_WRITERS = {"store/memory_writes.py", "store/facts.py", "store/imports.py"}


def sources() -> dict[str, str]:
    return {str(p.relative_to(SERVE_APP)): p.read_text("utf-8") for p in SERVE_APP.rglob("*.py")}


def raw_write_calls(text: str) -> list[str]:
    """Names of raw store writes called (or referenced) in a module."""
    return [
        node.attr
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute) and node.attr in RAW_WRITES
    ]


def test_only_the_guarded_writer_calls_the_raw_store_writes():
    callers = {path for path, text in sources().items() if raw_write_calls(text)}
    assert callers == {"store/guarded.py"}
    assert set(raw_write_calls(GUARDED.read_text("utf-8"))) == RAW_WRITES


def test_the_raw_writes_are_private_to_the_stores():
    from serve_app.store.facts import FactStore
    from serve_app.store.memories import MemoryStore

    for store in (MemoryStore, FactStore):
        public = {n for n in vars(store) if not n.startswith("_")}
        assert not public & {"add", "update", "delete", "delete_scope", "upsert"}, store


def test_every_producer_writes_through_the_guarded_writer():
    found = sources()
    for path, what in PRODUCERS.items():
        assert "GuardedWriter" in found[path] or ".writer." in found[path], (path, what)
        assert "MemoryStore(" not in found[path] and "FactStore(pool)" not in found[path], path


def test_no_module_outside_the_store_inserts_memory_or_fact_rows():
    writers = {path for path, text in sources().items() if ROW_WRITES.search(text)}
    assert writers <= ROW_WRITERS, writers - ROW_WRITERS
