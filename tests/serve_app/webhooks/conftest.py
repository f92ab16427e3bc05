"""A pool over a fresh migrated database for the store tests."""

from __future__ import annotations

import pytest

from serve_app.db.pool import open_pool
from serve_app.settings import Settings


@pytest.fixture
async def pool(fresh_db):
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    await pool.wait()
    yield pool
    await pool.close()
