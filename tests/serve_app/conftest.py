"""Fixtures of the in-process API tests (see serve_app/testing/inprocess.py)."""

from __future__ import annotations

import pytest

from models import load_encoder
from models.encoder import Encoder
from serve_app.testing.llm_server import FakeLLM


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    """The real int8 MiniLM on CPU, loaded once (directories may override it)."""
    return load_encoder("all-minilm-l6-v2-int8", device="cpu", threads=1)


@pytest.fixture
def llm():
    """The scripted OpenAI-compatible fake LLM (serve_app/testing/llm_server.py), started."""
    fake = FakeLLM().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_llm_server():
    """One scripted LLM for the session's LLM-client and extraction tests."""
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def fake_llm(fake_llm_server):
    """The session's scripted LLM, up and with no rules or calls (before and after)."""
    fake_llm_server.up()
    fake_llm_server.reset()
    yield fake_llm_server
    fake_llm_server.up()
    fake_llm_server.reset()
