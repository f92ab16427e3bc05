"""Start-up work, run once per application start before any replica serves.

`make run` (the launcher) and `serve run`/`serve deploy` (the app builder in
``serve_app.application``) both call :func:`bootstrap`: schema migrations, the
embedding model's facts (prepared once here, so replicas never race to build
it), its vector table, and the configured keys of the default tenant. Replicas
receive the resulting :class:`ModelFacts` as constructor arguments and do no
start-up work of their own beyond opening their pools.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from models import ModelSpec
from models import prepare_model as prepare_model_files
from serve_app.db.migrations import migrate
from serve_app.model_facts import ModelFacts
from serve_app.reembed.plan import plan_models
from serve_app.settings import Settings
from serve_app.store.keys import ever_had_service_key, generate_key, has_key, seed_key

log = logging.getLogger("memserve")
KEY_FILE = "bootstrap-key"  # in the data dir: a key generated under `serve run`/`deploy`


@dataclass(frozen=True)
class Bootstrapped:
    dsn: str
    model: ModelFacts
    generated_key: str | None = None  # the default tenant's new service key, shown once


def prepare_model(settings: Settings) -> ModelSpec:
    """The embedding model's spec, with any derived files (the verified int8 copy) built now."""
    return prepare_model_files(settings.embed.model, settings.models_dir)


def ensure_keys(dsn: str, settings: Settings) -> str | None:
    """Seed the configured bootstrap/admin keys; mint a service key on a fresh tenant only.

    A tenant that ever had a service key (recorded by a trigger, migration 0007) gets
    none minted: after an admin revoked them all, a restart must not hand out a new one.
    """
    generated = None
    tenant = settings.default_tenant
    if settings.bootstrap_key:
        seed_key(dsn, tenant, "service", settings.bootstrap_key, "bootstrap")
    elif not ever_had_service_key(dsn, tenant):
        generated = generate_key()
        seed_key(dsn, tenant, "service", generated, "bootstrap")
    elif not has_key(dsn, tenant, "service"):
        log.warning(
            "tenant '%s' has no active service key (all revoked); none is minted."
            " Create one with the admin key or set MEMSERVE_BOOTSTRAP_KEY.",
            tenant,
        )
    if settings.admin_key:
        seed_key(dsn, tenant, "admin", settings.admin_key, "admin")
    return generated


def bootstrap(settings: Settings, dsn: str) -> Bootstrapped:
    applied = migrate(dsn)
    if applied:
        log.info("applied migrations %s", applied)
    # The configured model's table; while another model is active it fills in the
    # background and the active one keeps serving (serve_app.reembed).
    model = plan_models(settings, dsn, prepare_model(settings))
    generated = ensure_keys(dsn, settings)  # shown by the caller: the terminal, or a file
    return Bootstrapped(dsn=dsn, model=model, generated_key=generated)


def show_key(settings: Settings, key: str) -> None:
    """Print a generated key once, to the terminal of `make run` (the launcher process,
    never a Ray task, whose output lands in Ray's log files)."""
    print(
        f"\n  Generated the service key of tenant '{settings.default_tenant}' (shown once):\n"
        f"    {key}\n  Set MEMSERVE_BOOTSTRAP_KEY to choose your own.\n",
        flush=True,
    )


def save_key(settings: Settings, key: str) -> Path:
    """Write a generated key to ``<data dir>/bootstrap-key`` (mode 0600) and log where, not
    the key: under `serve run`/`serve deploy` start-up may run in a Ray task, whose
    output is kept in Ray's log files (readable on every node, shown by the dashboard)."""
    path = settings.data_dir / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file left by an earlier start keeps no wider mode
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)
    log.warning(
        "generated the service key of tenant '%s'; it is in %s (mode 0600, read it once and"
        " delete it), or set MEMSERVE_BOOTSTRAP_KEY to choose your own",
        settings.default_tenant,
        path,
    )
    return path
