"""A webhook dispatcher in its own OS process, as an Extractor replica runs it (tests):
on a thread of its own at the lowered priority (serve_app/webhooks/worker.py).

    python -m serve_app.testing.dispatcher_process <dsn>

Settings come from the environment (``MEMSERVE_WEBHOOKS_*``), so a test picks the
interval, timeout and allowed networks. It runs until SIGTERM (a clean stop) or until
it is killed (SIGKILL: what a crashed replica looks like to the database and the
receivers). It prints ``ready`` once it runs.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from serve_app.settings import Settings
from serve_app.webhooks.worker import DispatcherThread


async def main(dsn: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    dispatcher = DispatcherThread(dsn, Settings()).start()
    print("ready", flush=True)
    try:
        await stop.wait()
    finally:
        await dispatcher.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
