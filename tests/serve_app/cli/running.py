"""What the CLI tests share: the app behind a real uvicorn server, and a command run as
an operator runs it (a subprocess without the test's MEMSERVE_* environment)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from tests.conftest import REPO


async def run_cli(command: str, url: str, key: str, *args: str) -> tuple[int, str, str]:
    """``python -m serve_app COMMAND --url URL --key KEY ARGS``: exit code, stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSERVE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "serve_app",
        command,
        "--url",
        url,
        "--key",
        key,
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``app`` on a free local port for the block; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
