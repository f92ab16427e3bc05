"""Which Embedder lane each deployment's embed callable asks for, on bare instances with
a recording stand-in for the Embedder handle (no Ray cluster): the Ingress and the
Extractor's worker pass ``bulk`` through to ``embed_many``; the re-embed worker's call is
always bulk; interactive single texts keep ``embed``."""

from __future__ import annotations

from typing import Any

import numpy as np

from deployments.ingress import Ingress
from serve_app.embedding_model import ModelFacts
from serve_app.worker import Worker

MODEL = ModelFacts(name="m", dim=2, table_slug="m", ref="m-ref")


class Method:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args: Any) -> Any:
        self.calls.append((self.name, args))
        texts = args[0] if isinstance(args[0], list) else [args[0]]

        async def answer() -> np.ndarray:
            out = np.ones((len(texts), 2), dtype=np.float32)
            return out if isinstance(args[0], list) else out[0]

        return answer()


class Handle:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.embed = Method(self.calls, "embed")
        self.embed_many = Method(self.calls, "embed_many")


async def test_the_ingress_passes_the_lane_through():
    ingress = Ingress.func_or_class.__new__(Ingress.func_or_class)
    ingress.embedder = handle = Handle()
    await ingress._embed(["one"], is_query=False, model=MODEL)
    await ingress._embed(["a", "b"], is_query=False, model=MODEL)
    out = await ingress._embed(["chunk"], is_query=False, model=MODEL, bulk=True)
    assert out.shape == (1, 2)
    assert handle.calls == [
        ("embed", ("one", False, "m-ref")),
        ("embed_many", (["a", "b"], False, "m-ref", False)),
        ("embed_many", (["chunk"], False, "m-ref", True)),  # bulk: even one text
    ]


async def test_the_extractor_asks_bulk_for_documents_and_re_embedding():
    # The Extractor hands its worker the handle's ``embed_many.remote`` (build_worker).
    worker = Worker.__new__(Worker)
    handle = Handle()
    worker.embed_many = handle.embed_many.remote
    await worker.embed(["fact"], is_query=True, model=MODEL)
    await worker.embed(["c1", "c2"], is_query=False, model=MODEL, bulk=True)
    await worker.embed_documents(["old memory"], "new-model")
    assert handle.calls == [
        ("embed_many", (["fact"], True, "m-ref", False)),
        ("embed_many", (["c1", "c2"], False, "m-ref", True)),
        ("embed_many", (["old memory"], False, "new-model", True)),
    ]
