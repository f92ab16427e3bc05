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
from dataclasses import dataclass

from models import ModelSpec
from models import prepare_model as prepare_model_files
from serve_app.db.migrations import migrate
from serve_app.model_facts import ModelFacts
from serve_app.reembed.plan import plan_models
from serve_app.settings import Settings
from serve_app.store.keys import ever_had_service_key, generate_key, has_key, seed_key

log = logging.getLogger("memserve")


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
    generated = ensure_keys(dsn, settings)
    if generated:
        print(
            f"\n  Generated the service key of tenant '{settings.default_tenant}' (shown once):\n"
            f"    {generated}\n  Set MEMSERVE_BOOTSTRAP_KEY to choose your own.\n",
            flush=True,
        )
    return Bootstrapped(dsn=dsn, model=model, generated_key=generated)
