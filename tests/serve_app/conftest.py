"""Fixtures of the in-process API tests (see tests/serve_app/inprocess.py)."""

from __future__ import annotations

import pytest

from models import load_encoder
from models.encoder import Encoder


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    """The real int8 MiniLM on CPU, loaded once (directories may override it)."""
    return load_encoder("all-minilm-l6-v2-int8", device="cpu", threads=1)
