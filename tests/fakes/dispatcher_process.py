"""A webhook dispatcher in its own OS process, as an Extractor replica runs it (tests).

    python -m tests.fakes.dispatcher_process <dsn>

Settings come from the environment (``MEMSERVE_WEBHOOKS_*``), so a test picks the
interval, timeout and allowed networks. It runs until SIGTERM (a clean stop) or until
it is killed (SIGKILL: what a crashed replica looks like to the database and the
receivers). It prints ``ready`` once its pool is open.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from serve_app.db.pool import open_pool
from serve_app.settings import Settings, WebhookSettings
from serve_app.webhooks.dispatcher import Dispatcher


async def main(dsn: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    pool = await open_pool(dsn, Settings(), min_size=1)
    try:
        await pool.wait()
        dispatcher = Dispatcher.from_settings(pool, WebhookSettings()).start()
        print("ready", flush=True)
        try:
            await stop.wait()
        finally:
            await dispatcher.stop()
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
