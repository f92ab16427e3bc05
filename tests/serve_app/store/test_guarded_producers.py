"""One write path: only serve_app/store/guarded.py runs the write statements of memories and
facts (the stores only read), every producer goes through GuardedWriter, and no module
outside the store writes memory or fact rows with SQL of its own (read by walking the
source)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SERVE_APP = Path(__file__).resolve().parents[3] / "serve_app"
# Who imports the write statements: the writer; and the document store, whose chunks
# (memory rows of a document) are deleted with their document, never through the writer.
STATEMENT_USERS = {
    "serve_app.store.memory_writes": {"store/guarded.py", "store/documents.py"},
    "serve_app.store.fact_writes": {"store/guarded.py"},
}
WRITE_NAMES = ("add", "update", "delete", "upsert", "insert", "_raw")
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
ROW_WRITERS = {"store/memory_writes.py", "store/fact_writes.py", "store/imports.py"}


def sources() -> dict[str, str]:
    return {str(p.relative_to(SERVE_APP)): p.read_text("utf-8") for p in SERVE_APP.rglob("*.py")}


def imported(text: str) -> set[str]:
    """Modules a source imports (``from a.b import c`` counts ``a.b`` and ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_only_the_writer_runs_the_write_statements():
    found = {path: imported(text) for path, text in sources().items()}
    for module, allowed in STATEMENT_USERS.items():
        users = {path for path, names in found.items() if module in names}
        assert users == allowed, module


def test_the_stores_only_read():
    from serve_app.store.facts import FactStore
    from serve_app.store.memories import MemoryStore

    for store in (MemoryStore, FactStore):
        writes = [n for n in vars(store) if n.lstrip("_").startswith(WRITE_NAMES)]
        assert writes == [], store


def test_every_producer_writes_through_the_guarded_writer():
    found = sources()
    for path, what in PRODUCERS.items():
        assert "GuardedWriter" in found[path] or ".writer." in found[path], (path, what)
        assert "MemoryStore(" not in found[path] and "FactStore(pool)" not in found[path], path


def test_no_module_outside_the_store_inserts_memory_or_fact_rows():
    writers = {path for path, text in sources().items() if ROW_WRITES.search(text)}
    assert writers <= ROW_WRITERS, writers - ROW_WRITERS
