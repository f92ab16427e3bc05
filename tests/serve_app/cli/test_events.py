"""``python -m serve_app events`` as a consumer runs it, against the app behind a real
uvicorn server: every event once, as JSON Lines, and a cursor that resumes after them."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import uvicorn

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services
from tests.conftest import REPO

KEY = "msk_events_cli_test_key_0123456789"


async def cli(url: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSERVE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "serve_app",
        "events",
        "--url",
        url,
        "--key",
        KEY,
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


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
        config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        try:
            while not server.started:
                assert not task.done(), "uvicorn did not start"
                await asyncio.sleep(0.02)
            url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
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
        finally:
            server.should_exit = True
            await task
