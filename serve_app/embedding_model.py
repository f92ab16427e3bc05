"""What every deployment must agree on about the embedding models (built by the bootstrap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models import ModelSpec


@dataclass(frozen=True)
class ModelFacts:
    """The model that serves search and dedup, and the one being filled, if any.

    ``ref`` is what loads the model in the Embedder (a spec name or a model directory,
    as ``MEMSERVE_EMBED_MODEL`` said when it was registered).
    """

    name: str
    dim: int
    table_slug: str
    ref: str = ""
    filling: ModelFacts | None = None  # a model change in progress (serve_app.reembed)

    @classmethod
    def of(cls, spec: ModelSpec, ref: str | None = None) -> ModelFacts:
        return cls(name=spec.name, dim=spec.dim, table_slug=spec.table_slug, ref=ref or spec.name)

    @classmethod
    def of_row(cls, row: Any, filling: ModelFacts | None = None) -> ModelFacts:
        """From a registry row (:class:`serve_app.store.model_registry.ModelRow`)."""
        return cls(name=row.name, dim=row.dim, table_slug=row.slug, ref=row.ref, filling=filling)

    @property
    def refs(self) -> tuple[str, ...]:
        """Every model the Embedder must serve now: the active one, then the filling one."""
        return (self.ref,) + ((self.filling.ref,) if self.filling else ())
