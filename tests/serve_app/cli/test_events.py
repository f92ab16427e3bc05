"""``python -m serve_app events`` as a consumer runs it, against the app behind a real
uvicorn server: every event once, as JSON Lines, and a cursor that resumes after them."""

from __future__ import annotations

import json

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services
from tests.serve_app.cli.running import run_cli, served

KEY = "msk_events_cli_test_key_0123456789"


async def cli(url: str, *args: str) -> tuple[int, str, str]:
    return await run_cli("events", url, KEY, *args)


async def test_events_cli_prints_the_feed_and_resumes(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        async with bearer_client(app, KEY) as c:
            body = {
                "user_id": "alice",
                "items": [{"content": t, "infer": False} for t in ("a", "b", "c")],
            }
            assert (await c.post("/v1/memories/batch", json=body)).status_code == 201
        async with served(app) as url:
            code, out, err = await cli(url, "--limit", "2", "--content")
            assert code == 0, err
            events = [json.loads(line) for line in out.splitlines()]
            assert [(e["type"], e["content"]) for e in events] == [
                ("memory.added", "a"),
                ("memory.added", "b"),
                ("memory.added", "c"),
            ]
            cursor = err.strip().rsplit(" ", 1)[-1]
            assert cursor == events[-1]["cursor"]
            code, out, err = await cli(url, "--after", cursor)
            assert code == 0 and out == "" and cursor in err
            code, out, err = await cli(url, "--types", "memory.eaten")
            assert code != 0 and "unknown event types" in err
