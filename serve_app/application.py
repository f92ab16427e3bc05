"""Builds the Serve application graph: Ingress -> (Embedder, Retriever).

``app`` is the import path used by Serve config files; the launcher calls
``build_app`` with the per-deployment options read from the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ray.serve import Application

DEFAULT_CONFIG = Path(__file__).with_name("serve_config.yaml")
_DEPLOYMENT_KEYS = {
    "num_replicas",
    "autoscaling_config",
    "max_ongoing_requests",
    "max_queued_requests",
    "ray_actor_options",
    "user_config",
    "graceful_shutdown_timeout_s",
    "graceful_shutdown_wait_loop_s",
    "health_check_period_s",
    "health_check_timeout_s",
}


def load_config(path: Path | None = None) -> dict[str, Any]:
    return yaml.safe_load(Path(path or DEFAULT_CONFIG).read_text())


def deployment_options(config: dict[str, Any], app_name: str = "memserve") -> dict[str, dict]:
    """{deployment name: options} of one application in a Serve config."""
    for app in config.get("applications", []):
        if app.get("name") == app_name:
            return {
                d["name"]: {k: v for k, v in d.items() if k in _DEPLOYMENT_KEYS}
                for d in app.get("deployments", [])
            }
    return {}


def build_app(options: dict[str, dict] | None = None) -> Application:
    from deployments.embedder import Embedder
    from deployments.ingress import Ingress
    from deployments.retriever import Retriever

    options = options or {}

    def opts(deployment):
        return deployment.options(**options.get(deployment.name, {}))

    return opts(Ingress).bind(opts(Embedder).bind(), opts(Retriever).bind())


def app_builder(args: dict[str, Any] | None = None) -> Application:
    """Builder for `serve run serve_app.application:app_builder`."""
    return build_app()


def __getattr__(name: str) -> Any:
    # `app` is built on first access so importing this module stays cheap.
    if name == "app":
        return build_app()
    raise AttributeError(name)
