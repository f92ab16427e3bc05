"""``python -m serve_app classify-profiles`` as an operator runs it after an upgrade,
against the app behind a real uvicorn server: every user of the tenant, every page."""

from __future__ import annotations

import json

import psycopg

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services
from tests.serve_app.cli.running import run_cli, served

KEY = "msk_profiles_cli_test_key_0123456789"


async def cli(url: str, key: str, *args: str) -> tuple[int, str, str]:
    return await run_cli("classify-profiles", url, key, *args)


async def test_every_user_is_classified_page_by_page(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    settings.context.profile_classify_max = 1  # a call per memory: the CLI follows cursors
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        admin, _ = await services.keys.create("default", "admin")
        texts = {
            "bob": ["I'm allergic to peanuts", "Loves green tea, especially sencha"],
            "carol": ["Always answer me in short bullet points", "Lives in Oslo near the fjord"],
        }
        async with bearer_client(app, KEY) as c:
            for user, contents in texts.items():
                for text in contents:
                    r = await c.post("/v1/memories", json={"user_id": user, "content": text})
                    assert r.status_code == 201, r.text
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("UPDATE memory_items SET profile_class = NULL")  # as before the rule
        async with served(app) as url:
            code, out, err = await cli(url, admin, "--page", "1")
            assert code == 0, err
            done = {d["user_id"]: d for d in map(json.loads, out.splitlines())}
            assert done == {
                "bob": {"user_id": "bob", "examined": 2, "classified": 1},
                "carol": {"user_id": "carol", "examined": 2, "classified": 2},
            }
            assert json.loads(err.strip().splitlines()[-1]) == {
                "users": 2,
                "examined": 4,
                "classified": 3,
            }
            code, out, _ = await cli(url, admin, "--user", "carol")  # again: nothing to add
            assert code == 0 and json.loads(out)["classified"] == 0
            code, _, err = await cli(url, KEY)  # a service key is not an admin key
            assert code != 0 and "classify-profiles: 403" in err
    with psycopg.connect(fresh_db) as conn:
        classes = dict(conn.execute("SELECT content, profile_class FROM memory_items").fetchall())
    assert classes["I'm allergic to peanuts"] == "constraint"
    assert classes["Loves green tea, especially sencha"] is None
