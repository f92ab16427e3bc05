"""A service key generated at start-up is never printed where Ray keeps output: the app
builder of `serve run`/`serve deploy` (which may run in a Ray task) writes it once to a
0600 file in the data dir and logs only where; `make run`'s launcher shows it on its own
terminal. Real Postgres, the real bootstrap."""

from __future__ import annotations

import logging
import os
import stat

import psycopg
import pytest

from serve_app import application
from serve_app.bootstrap import KEY_FILE, show_key
from serve_app.settings import Settings, get_settings
from serve_app.store.keys import hash_key


@pytest.fixture
def builder_env(fresh_db, tmp_path, monkeypatch):
    """The environment of `serve deploy`'s app builder: a database, a data dir, no key."""
    models = Settings().models_dir  # the models already prepared for the test session
    for name in list(os.environ):
        if name.startswith("MEMSERVE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MEMSERVE_DATABASE_URL", fresh_db)
    monkeypatch.setenv("MEMSERVE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEMSERVE_MODELS_CACHE", str(models))
    get_settings.cache_clear()
    yield tmp_path / "data"
    get_settings.cache_clear()


def test_the_app_builder_writes_a_generated_key_to_a_private_file_and_prints_nothing(
    builder_env, fresh_db, capfd, caplog
):
    with caplog.at_level(logging.INFO):
        application.prepare()
    path = builder_env / KEY_FILE
    key = path.read_text().strip()
    assert key.startswith("msk_")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = capfd.readouterr()
    assert key not in out.out and key not in out.err and key not in caplog.text
    assert str(path) in caplog.text  # the operator is told where, not what
    with psycopg.connect(fresh_db) as conn:
        rows = conn.execute(
            "SELECT role FROM api_keys WHERE key_hash = %s", (hash_key(key),)
        ).fetchall()
    assert rows == [("service",)]  # the file holds the key that was minted

    path.chmod(0o644)
    application.prepare()  # a later start mints none: the file is left as it was
    assert path.read_text().strip() == key and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_launcher_shows_a_generated_key_on_its_terminal(capsys):
    show_key(Settings(), "msk_shown_once_0123456789")
    assert "msk_shown_once_0123456789" in capsys.readouterr().out
