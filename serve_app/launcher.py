"""`make run`: embedded Postgres (unless a DSN is given), Ray, and the Serve app.

The launcher owns the embedded database so it outlives replica restarts, and
stops Serve, Ray and the database cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time

from serve_app.bootstrap import ModelFacts, bootstrap, show_key
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.ingress_proxy import drain_env, ray_env, reap_orphans, start_env
from serve_app.secret_env import runtime_env_vars
from serve_app.settings import Settings, get_settings
from serve_app.terminal_output import banner, quiet_logging, ray_context_urls, stream_replica_logs

log = logging.getLogger("memserve")


def _ray_env() -> dict[str, str]:
    """Settings for the replicas' runtime env: no secret (Ray's dashboard shows it).

    Replicas of the local node inherit the launcher's environment (secrets included);
    other nodes read theirs from their own environment or ``MEMSERVE_SECRETS_FILE``.
    """
    return runtime_env_vars(os.environ)


def run(settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    quiet_logging()  # a few readable lines; MEMSERVE_LOG_LEVEL=INFO|DEBUG for the rest
    started = time.monotonic()
    pg: EmbeddedPostgres | None = None
    dsn = settings.database_url
    if not dsn:
        pg = EmbeddedPostgres(settings.data_dir)
        dsn = pg.start()
        os.environ["MEMSERVE_DATABASE_URL"] = dsn
    data = f"{pg.pgdata} (embedded PostgreSQL + pgvector)" if pg else "MEMSERVE_DATABASE_URL"
    print(f"memserve: starting (data in {data})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    watchdog_stop = threading.Event()
    watchdog = None
    if pg is not None and settings.db.embedded_watchdog_s > 0:
        watchdog = pg.watch(watchdog_stop, settings.db.embedded_watchdog_s)
    try:
        boot = bootstrap(settings, dsn)
        if boot.generated_key:  # this process is the terminal's, not a Ray task
            show_key(settings, boot.generated_key)
        _serve(settings, boot.model, stop, started, data)
    finally:
        watchdog_stop.set()
        if watchdog is not None:
            watchdog.join(30)
        if pg is not None and pg.stop():
            print("embedded PostgreSQL stopped", flush=True)


def _serve(
    settings: Settings, model: ModelFacts, stop: threading.Event, started: float, data: str
) -> None:
    if settings.serving.throughput_optimized:
        # Ray >= 2.56: user code on the replica's own event loop, gRPC between
        # replicas, GC frozen after start-up. Read by every Ray process at import,
        # so it goes into the environment the local node's processes inherit.
        os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    # The drain periods (Ray's 30 s defaults would be waited out on every shutdown, after
    # our drain has already emptied the proxies and replicas).
    os.environ.update(drain_env(settings.serving.drain_min_s))
    os.environ.update(start_env())  # a proxy slow to start under load is not killed
    os.environ.setdefault("RAY_worker_niceness", str(settings.serving.worker_niceness))
    if not settings.serving.address:
        # HAProxy instead of Serve's Python proxy where its binary runs (a cluster's
        # own environment decides for its nodes).
        os.environ.update(ray_env(settings.serving.haproxy, service_port=settings.port))
    import ray
    from ray import serve

    from serve_app.application import build_app, deployment_options, load_config, max_cpus

    config = load_config(settings.serve_config)
    init_kwargs = dict(
        # "local": a new node even when another Ray runs on this machine (an address
        # in /tmp/ray/ray_current_cluster or RAY_ADDRESS would be joined otherwise).
        address=settings.serving.address or "local",
        num_cpus=settings.serving.num_cpus
        or math.ceil(max(os.cpu_count() or 1, 4, max_cpus(deployment_options(config)))),
        include_dashboard=settings.serving.dashboard,
        runtime_env={"env_vars": _ray_env()},
        logging_level=logging.WARNING,
        log_to_driver=stream_replica_logs(),
        **(
            {"_metrics_export_port": settings.serving.metrics_port}
            if settings.serving.metrics_port and not settings.serving.address
            else {}
        ),
    )
    for attempt in range(3):
        # Ray gives a new local node a fixed 30 s to register; a saturated machine can
        # miss that. Starting again is safe (nothing was deployed yet).
        try:
            context = ray.init(**init_kwargs)
            break
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == 2:
                raise
            log.warning("Ray node start timed out; retrying (%d/2)", attempt + 1)
            ray.shutdown()
    # ray.init replaces the SIGTERM handler (it would kill this process mid-request):
    # take it back so SIGTERM drains in-flight requests like Ctrl-C does.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        serve.run(build_app(model, deployment_options(config)), name="memserve", route_prefix="/")
        dashboard, logs = ray_context_urls(context)
        print(banner(settings, data, time.monotonic() - started, dashboard, logs), flush=True)
        while not stop.wait(0.5):
            pass
        print("shutting down...", flush=True)
        from serve_app.drain import drain

        ingress = deployment_options(config).get("Ingress", {})
        drain(timeout_s=float(ingress.get("graceful_shutdown_timeout_s", 20)))
        serve.shutdown()
    finally:
        ray.shutdown()
        if not settings.serving.address:
            stopped = reap_orphans(settings.port)
            if stopped:
                log.warning("stopped HAProxy left on port %d by Serve: %s", settings.port, stopped)
