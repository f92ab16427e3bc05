"""Start-up: register the configured model; which model serves and which one fills."""

from __future__ import annotations

import logging

from models import BUILTIN_SPECS, ModelSpec
from models import prepare_model as prepare_model_files
from models.resolve import _cached_names, get_spec
from serve_app.embedding_model import ModelFacts
from serve_app.settings import Settings
from serve_app.store.model_registry import Wanted, reconcile
from serve_app.store.vectors import ensure_table

log = logging.getLogger("memserve")


def plan_models(settings: Settings, dsn: str, spec: ModelSpec) -> ModelFacts:
    """Create the configured model's table and register it (``spec``: its prepared spec).

    When another model is active, that one keeps serving (its files are prepared here
    too, it still embeds queries) and the configured one fills in the background.
    """
    wanted = Wanted(spec.table_slug, settings.embed.model, spec.name, spec.dim)
    r = settings.retrieval
    ensure_table(
        dsn,
        wanted.slug,
        wanted.dim,
        hnsw=(r.pg_hnsw_m, r.pg_hnsw_ef_construction) if r.pg_hnsw else None,
        shared_hnsw=(r.pg_hnsw_shared_m, r.pg_hnsw_shared_ef_construction)
        if r.pg_hnsw_shared
        else None,
    )
    active, filling = reconcile(
        dsn, wanted, lambda slug: known_spec(slug, settings), margin_s=settings.reembed.margin_s
    )
    fill = ModelFacts.of_row(filling) if filling else None
    if active.slug != wanted.slug:
        prepare_model_files(active.ref, settings.models_dir)
    return ModelFacts.of_row(active, fill)


def known_spec(slug: str, settings: Settings) -> Wanted | None:
    """A built-in or cached spec whose table is ``memory_vectors_<slug>`` (legacy adoption)."""
    names = list(BUILTIN_SPECS) + _cached_names(settings.models_dir)
    for name in names:
        try:
            spec = get_spec(name, settings.models_dir)
        except Exception:  # an unreadable cached spec is not a candidate
            continue
        if spec.table_slug == slug:
            return Wanted(slug, name, spec.name, spec.dim)
    return None
