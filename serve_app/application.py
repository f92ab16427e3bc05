"""Builds the Serve application graph: Ingress -> (Embedder, Retriever, Extractor).

``app`` is the import path used by Serve config files (`serve run`/`serve deploy`:
start-up work runs here, once); the launcher runs the same bootstrap itself and
calls ``build_app`` with the per-deployment options read from the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ray.serve import Application

from serve_app.bootstrap import ModelFacts, bootstrap, save_key

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
    "logging_config",
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


def max_cpus(options: dict[str, dict]) -> float:
    """CPUs every replica the deployments may scale to asks for (``num_cpus`` x max
    replicas): a local Ray node offers at least this many, so autoscaling never waits
    on a logical CPU the machine's cores could serve."""
    total = 0.0
    for o in options.values():
        auto = o.get("autoscaling_config") or {}
        replicas = auto.get("max_replicas", o.get("num_replicas", 1))
        total += float((o.get("ray_actor_options") or {}).get("num_cpus", 1)) * int(replicas)
    return total


def build_app(model: ModelFacts, options: dict[str, dict] | None = None) -> Application:
    """The deployment graph; ``model`` comes from :func:`serve_app.bootstrap.bootstrap`."""
    from deployments.embedder import Embedder
    from deployments.extractor import Extractor
    from deployments.ingress import Ingress
    from deployments.retriever import Retriever

    options = options or {}

    def opts(deployment):
        return deployment.options(**options.get(deployment.name, {}))

    # A model change in progress: the Embedder serves the active and the filling model.
    embedder = opts(Embedder).bind(preload=model.refs)
    extractor = opts(Extractor).bind(model, embedder)  # LLM extraction, off the chat path
    return opts(Ingress).bind(model, embedder, opts(Retriever).bind(model), extractor)


def prepare() -> ModelFacts:
    """Without the launcher (`serve run`/`serve deploy`): find or start the database and
    run the start-up work once, before any replica starts.

    This may run in a Ray task (`serve deploy` builds the app in one), so a generated
    key is never printed: it goes to a 0600 file in the data dir (:func:`save_key`)."""
    from serve_app.db.resolve import resolve_dsn
    from serve_app.settings import get_settings

    settings = get_settings()
    boot = bootstrap(settings, resolve_dsn(settings))
    if boot.generated_key:
        save_key(settings, boot.generated_key)
    return boot.model


def app_builder(args: dict[str, Any] | None = None) -> Application:
    """Builder for `serve run serve_app.application:app_builder [config=<serve config>]`.

    With an import path (not a config file) Serve applies no per-deployment
    options, so they are read from ``config`` (default: the packaged file).
    """
    model = prepare()
    path = (args or {}).get("config")
    return build_app(model, deployment_options(load_config(Path(path) if path else None)))


def __getattr__(name: str) -> Any:
    # `app` is built on first access so importing this module stays cheap; the
    # Serve config's import_path points here and overrides the options itself.
    if name == "app":
        return build_app(prepare())
    raise AttributeError(name)
