"""Operator-facing hardening: secrets stay out of Ray's runtime env, the dashboard on
localhost, the chat proxy's caps, and no bootstrap key minted twice."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import yaml

from serve_app import launcher
from serve_app.bootstrap import ensure_keys
from serve_app.db.migrations import migrate
from serve_app.errors import ApiError
from serve_app.secret_env import load_secrets_file, runtime_env_vars
from serve_app.services.chat_caps import allowed_models, check_caps
from serve_app.settings import ChatSettings, Settings
from serve_app.spend.estimate import reported_usage

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "MEMSERVE_DATABASE_URL": "postgresql://u:hunter2@db/x",
    "MEMSERVE_BOOTSTRAP_KEY": "msk_boot_secret",
    "MEMSERVE_ADMIN_KEY": "msk_admin_secret",
    "MEMSERVE_LLM_API_KEY": "sk-upstream-secret",
}


def test_launcher_runtime_env_holds_no_secret(monkeypatch):
    for name, value in {**SECRETS, "MEMSERVE_EMBED_MODEL": "m", "MEMSERVE_PORT": "9"}.items():
        monkeypatch.setenv(name, value)
    env = launcher._ray_env()
    assert env["MEMSERVE_EMBED_MODEL"] == "m" and env["MEMSERVE_PORT"] == "9"
    blob = repr(env)
    for name, value in SECRETS.items():
        assert name not in env and value not in blob


def test_secrets_file_fills_what_the_environment_lacks(tmp_path):
    path = tmp_path / "memserve.env"
    path.write_text(
        "# secrets\nMEMSERVE_ADMIN_KEY='msk_from_file'\nexport MEMSERVE_LLM_API_KEY=sk-f\n"
        "MEMSERVE_BOOTSTRAP_KEY=from_file\nPATH=/evil\n"
    )
    path.chmod(0o600)
    env = {"MEMSERVE_SECRETS_FILE": str(path), "MEMSERVE_BOOTSTRAP_KEY": "from_env"}
    assert sorted(load_secrets_file(env)) == ["MEMSERVE_ADMIN_KEY", "MEMSERVE_LLM_API_KEY"]
    assert env["MEMSERVE_ADMIN_KEY"] == "msk_from_file" and env["MEMSERVE_LLM_API_KEY"] == "sk-f"
    assert env["MEMSERVE_BOOTSTRAP_KEY"] == "from_env" and "PATH" not in env
    assert runtime_env_vars(env) == {"MEMSERVE_SECRETS_FILE": str(path)}
    with pytest.raises(RuntimeError):
        load_secrets_file({"MEMSERVE_SECRETS_FILE": str(tmp_path / "missing")})


def test_cluster_dashboard_is_bound_to_localhost():
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    head = " ".join(cluster["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "0.0.0.0" not in head
    assert "MEMSERVE_SECRETS_FILE" in head
    text = (REPO / "cluster.yaml").read_text()
    assert not any(v in text for v in SECRETS.values())


@pytest.mark.parametrize(
    "payload, fragment",
    [
        ({"n": 16}, "n 16"),
        ({"max_tokens": 1_000_000}, "max_tokens 1000000"),
        ({"max_completion_tokens": 10**9}, "max_completion_tokens"),
        ({"model": "gpt-4-32k-expensive"}, "not allowed"),
        ({"tools": [{"type": "function"}] * 33}, "tools"),
        ({"n": 0}, "positive integer"),
        ({"max_tokens": "many"}, "positive integer"),
    ],
)
def test_chat_caps_refuse_with_a_clear_422(payload, fragment):
    caps = ChatSettings()
    with pytest.raises(ApiError) as e:
        check_caps(payload, caps, allowed_models(caps, "gpt-4o-mini"))
    assert e.value.status == 422 and fragment in e.value.message


def test_chat_caps_allow_normal_requests():
    caps = ChatSettings(models="a, b")
    models = allowed_models(caps, "ignored")
    assert models == {"a", "b"}
    check_caps({"model": "a", "n": 1, "max_tokens": 512, "tools": []}, caps, models)
    check_caps({}, caps, models)
    assert reported_usage({"usage": {"prompt_tokens": 7, "completion_tokens": 3}}) == (7, 3, 0)
    cached = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 5},
    }
    assert reported_usage({"usage": cached}) == (7, 3, 5)
    assert reported_usage({"usage": None}) == (0, 0, 0)


def test_bootstrap_key_minted_only_on_a_tenant_that_never_had_one(fresh_db):
    migrate(fresh_db)
    settings = Settings(bootstrap_key=None, admin_key=None)
    first = ensure_keys(fresh_db, settings)
    assert first is not None and first.startswith("msk_")
    assert ensure_keys(fresh_db, settings) is None  # it has one
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE role = 'service'")
    assert ensure_keys(fresh_db, settings) is None  # all revoked: still none minted
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("DELETE FROM api_keys")
    assert ensure_keys(fresh_db, settings) is None  # even deleted: it had one
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone()[0] == 0
