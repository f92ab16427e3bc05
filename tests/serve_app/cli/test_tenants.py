"""``python -m serve_app tenant create NAME`` as an operator runs it: the tenant's admin
key is printed once, and it works (its own tenant's settings and keys, nobody else's)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services
from tests.conftest import REPO


def tenant_create(dsn: str, name: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSERVE_")}
    env["MEMSERVE_DATABASE_URL"] = dsn
    return subprocess.run(
        [sys.executable, "-m", "serve_app", "tenant", "create", name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_tenant_create_prints_a_working_admin_key_once(fresh_db, encoder):
    run = tenant_create(fresh_db, "acme")
    assert run.returncode == 0, run.stderr
    [key] = run.stdout.split()  # stdout is the key and nothing else
    assert key.startswith("msk_") and "shown once" in run.stderr and key not in run.stderr

    again = tenant_create(fresh_db, "acme")
    assert again.returncode != 0 and "exists" in again.stderr and "msk_" not in again.stdout
    bad = tenant_create(fresh_db, "no spaces/or slashes")
    assert bad.returncode != 0 and "invalid tenant name" in bad.stderr

    settings = Settings(database_url=fresh_db, bootstrap_key="msk_cli_test_bootstrap_0123456789")
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
        bearer_client(app, key) as c,
    ):
        r = await c.get("/v1/admin/tenant/settings")
        assert r.status_code == 200 and r.json()["tenant_id"] == "acme", r.text
        r = await c.post("/v1/admin/keys", json={"role": "service"})
        assert r.status_code == 201 and r.json()["tenant_id"] == "acme", r.text
        listed = (await c.get("/v1/admin/keys")).json()["keys"]
        assert {k["role"] for k in listed} == {"admin", "service"}
        assert all(k["tenant_id"] == "acme" for k in listed)
        assert key not in (await c.get("/v1/admin/keys")).text  # never shown again


@pytest.mark.parametrize("name", ["", "-dash-first", "a" * 65, "tab\tname", "colon:name"])
def test_bad_names_are_refused(name):
    from serve_app.cli.tenants import NAME

    assert not NAME.match(name)
