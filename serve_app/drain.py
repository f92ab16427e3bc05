"""Graceful shutdown: let in-flight HTTP requests finish before Serve goes down.

``serve.shutdown()`` stops the HTTP proxies at once, which cuts connections whose
requests are still being served. The launcher therefore first puts every proxy in
Serve's draining state (health checks answer 503 so a load balancer stops sending;
requests that still arrive are served) and waits until each proxy reports itself
drained: no HTTP request in flight, counted from the moment the proxy receives it
until its response is written. The Ingress replicas' own counters are checked as
well, for apps reached through handles. Then Serve shuts down; the replicas'
graceful shutdown covers the downstream tiers.

With HAProxy in front (serve_app.ingress_proxy) the proxy actors are Serve's
``HAProxyManager`` and the Python fallback proxy it keeps on the head node; both
answer the same two calls. HAProxy enters draining by reloading itself (a new
process that fails health checks; the old one finishes its requests), so it is
drained once the old process has exited and no backend session is open.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("memserve")

REPLICA_PREFIX = "SERVE_REPLICA::"
PROXY_PREFIX = "SERVE_PROXY_ACTOR"
SERVE_NAMESPACE = "serve"
BUSY = -1  # a replica that did not answer in time: assume it is still working


def _named_actors(prefix: str) -> list[str]:
    import ray

    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == SERVE_NAMESPACE and a["name"].startswith(prefix)
    ]


def replica_actor_names(app: str, deployment: str) -> list[str]:
    """Names of the live replica actors of one deployment (``SERVE_REPLICA::app#dep#id``)."""
    return _named_actors(f"{REPLICA_PREFIX}{app}#{deployment}#")


def proxy_actors() -> list[Any]:
    """Handles of the Serve HTTP proxies (one per node)."""
    import ray

    handles = []
    for name in _named_actors(PROXY_PREFIX):
        try:
            handles.append(ray.get_actor(name, namespace=SERVE_NAMESPACE))
        except ValueError:  # gone since listed
            continue
    return handles


_GONE, _SLOW = object(), object()


def _ask(actor: Any, method: str, timeout_s: float) -> Any:
    """One call to a Serve actor: its answer, ``_SLOW`` if it did not answer in time
    (a busy event loop is not an idle one), ``_GONE`` if it died since listed."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        return ray.get(getattr(actor, method).remote(), timeout=timeout_s)
    except GetTimeoutError:
        return _SLOW
    except Exception:
        return _GONE


def ongoing_requests(app: str, deployment: str, timeout_s: float = 2.0) -> int:
    """Requests in flight across the deployment's replicas, or ``BUSY`` when a replica
    did not answer in time. A replica that is gone has nothing in flight."""
    import ray

    total = 0
    for name in replica_actor_names(app, deployment):
        try:
            actor = ray.get_actor(name, namespace=SERVE_NAMESPACE)
        except ValueError:  # removed since listed
            continue
        n = _ask(actor, "get_num_ongoing_requests", timeout_s)
        if n is _SLOW:
            return BUSY
        if n is not _GONE:
            total += int(n)
    return total


def proxies_drained(proxies: list[Any], timeout_s: float = 2.0) -> bool:
    """True when every proxy has drained; a proxy that is gone counts as drained."""
    answers = (_ask(p, "is_drained", timeout_s) for p in proxies)
    return all(a is _GONE or a is True for a in answers)


def start_draining(proxies: list[Any], timeout_s: float = 15.0) -> None:
    """Put each proxy in draining state; an HAProxy reload can take seconds on a busy box."""
    import ray

    for proxy in proxies:
        try:
            ray.get(proxy.update_draining.remote(True), timeout=timeout_s)
        except Exception as exc:  # a proxy that cannot be told still gets waited on
            log.warning("could not put proxy in draining state: %s", exc)


def drain(
    app: str = "memserve",
    deployment: str = "Ingress",
    timeout_s: float = 30.0,
    poll_s: float = 0.25,
    quiet_polls: int = 2,
    flush_s: float = 0.5,
) -> bool:
    """Block until the proxies are drained and ``deployment`` has had no request in
    flight for ``quiet_polls`` consecutive polls, plus ``flush_s``; or until
    ``timeout_s`` passed. True if it drained."""
    deadline = time.monotonic() + timeout_s
    proxies = proxy_actors()
    start_draining(proxies)
    quiet = 0
    while time.monotonic() < deadline:
        n = ongoing_requests(app, deployment)
        idle = n == 0 and proxies_drained(proxies)
        quiet = quiet + 1 if idle else 0
        if quiet >= quiet_polls:
            # The last response may still be in the proxy's socket buffer.
            time.sleep(flush_s)
            return True
        if n:
            log.info("draining: %s request(s) in flight", "some" if n == BUSY else n)
        time.sleep(poll_s)
    log.warning("drain timed out after %.0fs with requests in flight", timeout_s)
    return False
