"""``python -m serve_app tenant issuers`` as an operator runs it, then a token of the
issuer it added signing in to the in-process app (inline keys: no fetch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services
from serve_app.testing.jwt_issuer import LocalIssuer
from tests.conftest import REPO


def issuers_cli(dsn: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSERVE_")}
    env["MEMSERVE_DATABASE_URL"] = dsn
    return subprocess.run(
        [sys.executable, "-m", "serve_app", "tenant", "issuers", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_issuers_are_added_listed_and_removed(fresh_db, encoder):
    issuer = LocalIssuer()  # not started: its keys are given inline
    entry = {"issuer": issuer.issuer, "audiences": ["cli"], "jwks": issuer.jwks()}
    run = issuers_cli(fresh_db, "acme", "--add", json.dumps(entry))
    assert run.returncode == 0, run.stderr
    assert [i["issuer"] for i in json.loads(run.stdout)] == [issuer.issuer]
    taken = issuers_cli(fresh_db, "other", "--add", json.dumps(entry))
    assert taken.returncode != 0 and "another tenant" in taken.stderr
    bad = issuers_cli(fresh_db, "acme", "--add", json.dumps({**entry, "algorithms": ["HS256"]}))
    assert bad.returncode != 0 and "invalid issuer" in bad.stderr
    assert len(json.loads(issuers_cli(fresh_db, "acme").stdout)) == 1

    settings = Settings(database_url=fresh_db, bootstrap_key="msk_cli_test_bootstrap_0123456789")
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        async with bearer_client(app, issuer.token("ann", "cli")) as c:
            r = await c.post("/v1/memories", json={"content": "I like figs"})
            assert r.status_code == 201 and r.json()["user_id"] == "ann", r.text
            assert (await c.get("/mem0/v1/ping/")).json()["org_id"] == "acme"
        assert issuers_cli(fresh_db, "acme", "--remove", issuer.issuer).returncode == 0
        services.tenants.changed("")  # what the NOTIFY does on a listening replica
        async with bearer_client(app, issuer.token("ann", "cli")) as c:
            assert (await c.get("/v1/memories")).status_code == 401
    issuer.server.server_close()
