"""Graceful shutdown: let in-flight HTTP requests finish before Serve goes down.

``serve.shutdown()`` stops the HTTP proxies at once, which cuts connections whose
requests are still being served. The launcher therefore first waits until no
Ingress replica has a request in flight (bounded by the Ingress's
``graceful_shutdown_timeout_s``), then shuts Serve down; the replicas' own
graceful shutdown covers the downstream tiers.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("memserve")

REPLICA_PREFIX = "SERVE_REPLICA::"
SERVE_NAMESPACE = "serve"


def replica_actor_names(app: str, deployment: str) -> list[str]:
    """Names of the live replica actors of one deployment (``SERVE_REPLICA::app#dep#id``)."""
    import ray

    prefix = f"{REPLICA_PREFIX}{app}#{deployment}#"
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == SERVE_NAMESPACE and a["name"].startswith(prefix)
    ]


def ongoing_requests(app: str, deployment: str, timeout_s: float = 2.0) -> int:
    """Requests in flight across the deployment's replicas (unreachable replicas count 0)."""
    import ray

    total = 0
    for name in replica_actor_names(app, deployment):
        try:
            actor = ray.get_actor(name, namespace=SERVE_NAMESPACE)
            total += int(ray.get(actor.get_num_ongoing_requests.remote(), timeout=timeout_s))
        except Exception:  # a replica that is gone has nothing in flight
            continue
    return total


def drain(
    app: str = "memserve",
    deployment: str = "Ingress",
    timeout_s: float = 30.0,
    poll_s: float = 0.25,
    quiet_polls: int = 2,
    flush_s: float = 1.0,
) -> bool:
    """Block until ``deployment`` has had no requests in flight for ``quiet_polls``
    consecutive polls (a request between proxy and replica is not counted yet, hence
    more than one) plus ``flush_s``, or ``timeout_s`` passed. True if it drained."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        n = ongoing_requests(app, deployment)
        quiet = quiet + 1 if n == 0 else 0
        if quiet >= quiet_polls:
            # A finished request's response may still be on its way back through
            # the proxy: give it time to reach the client before the proxy stops.
            time.sleep(flush_s)
            return True
        if n:
            log.info("draining: %d request(s) in flight", n)
        time.sleep(poll_s)
    log.warning("drain timed out after %.0fs with requests in flight", timeout_s)
    return False
