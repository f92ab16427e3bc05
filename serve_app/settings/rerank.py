"""Re-scoring of search and context candidates (a request's ``rerank``): off by default."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from serve_app.settings.base import group

Backend = Literal["onnx", "llm"]


class RerankSettings(BaseSettings):
    """Which re-scoring back-ends the operator offers, and the bounds of one call.

    ``backends``: what a request's ``rerank`` may use (empty: none, and a ``/v1`` request
    asking for it gets 422); a tenant may narrow it (``rerank.backends`` in the tenant
    settings), never widen it. ``onnx``: a cross-encoder the operator supplies in
    ``onnx_dir`` (``model.onnx`` + ``tokenizer.json``; nothing is downloaded). ``llm``:
    the extraction LLM (``MEMSERVE_LLM_*``), metered under the tenant's ``chat`` budgets
    (a request-path call, purpose ``rerank``): over budget the order is left as it was.
    """

    model_config = group("MEMSERVE_RERANK_")

    backends: list[Backend] = []
    default_backend: Backend | None = None  # ``rerank: true``'s; None: the first offered
    onnx_dir: Path | None = None
    # the first this many candidates are re-scored, the rest keep their order after them
    max_candidates: int = Field(default=20, ge=1, le=200)
    # a context block's (its judge's) pool: a block over a long history needs a deep one
    # (LoCoMo: a perfect judge of 100 shows 0.83 of the evidence, of 20 0.71), while a
    # search cuts to a small top_k anyway. None: ``max_candidates``.
    context_candidates: int | None = Field(default=None, ge=1, le=200)
    # In a context block the back-end's score decides which re-scored candidates are
    # shown, in its order, in place of the evidence rule (a cross-encoder reads the
    # message and the memory together; a cosine threshold cannot); candidates past
    # ``max_candidates`` are not shown. The bar is in the back-end's own scale: a
    # cross-encoder's logit (0: even odds for ms-marco and bge-reranker heads), the LLM's
    # 0-10. None: the back-end only orders, the evidence rule decides (a search is only
    # ordered either way).
    onnx_min_score: float | None = 0.0
    llm_min_score: float | None = Field(default=5.0, ge=0, le=10)
    batch_size: int = Field(default=16, ge=1)  # (query, candidate) pairs per ONNX run
    # tokens of one (query, candidate) pair for the cross-encoder (its position limit)
    max_length: int = Field(default=256, ge=8, le=4096)
    threads: int = Field(default=1, ge=1)  # ONNX intra-op threads (the request path shares CPU)
    max_chars: int = Field(default=500, ge=1)  # of each candidate shown to the LLM (and query)
    llm_max_tokens: int = Field(default=256, ge=16)  # the LLM answer's cap (a list of scores)
