"""A migrated database with a vector table of the test module's ``SLUG``/``DIM``."""

from __future__ import annotations

import pytest

from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table


@pytest.fixture
async def env(fresh_db, request):
    """(pool, store) over a fresh database; the module names the vector table's shape."""
    slug, dim = request.module.SLUG, request.module.DIM
    ensure_table(fresh_db, slug, dim)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    await pool.wait()
    yield pool, GuardedWriter(pool, slug)
    await pool.close()
