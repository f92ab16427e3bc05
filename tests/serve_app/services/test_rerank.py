"""A request's re-scoring step: a context block's re-scores the block's pool
(``MEMSERVE_RERANK_CONTEXT_CANDIDATES``), a search's its own, and the step knows its
back-end's bar once the re-scoring applied."""

from __future__ import annotations

import pytest

from serve_app.retrieval.rerank import build_reranker
from serve_app.services.rerank import RerankService
from serve_app.settings import RerankSettings
from serve_app.testing.cross_encoder import build_cross_encoder
from tests.serve_app.retrieval.test_rerank import QUERY, rows


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("xenc"))


def service(model_dir, **fields) -> RerankService:
    settings = RerankSettings(backends=["onnx"], onnx_dir=model_dir, **fields)
    return RerankService(build_reranker(settings, None))


async def test_a_context_step_rescores_the_blocks_pool_and_a_search_step_its_own(model_dir):
    svc = service(model_dir, max_candidates=2, context_candidates=4)
    try:
        search, _ = await svc.step(True, "acme", "u1", QUERY)
        block, _ = await svc.step("onnx", "acme", "u1", QUERY, context=True)
        assert (search.pool, block.pool) == (2, 4)
        assert search.bar is None and block.bar is None  # not known before the call
        await search(rows())
        await block(rows())
        assert (search.outcome.candidates, block.outcome.candidates) == (2, 4)
        assert sum("rerank_score" in r for r in await block(rows())) == 4
        assert block.bar == 0.0  # the onnx back-end's default bar
    finally:
        await svc.close()


async def test_without_a_context_pool_a_block_uses_the_searchs_and_no_bar_only_orders(
    model_dir,
):
    svc = service(model_dir, max_candidates=3, onnx_min_score=None)
    try:
        step, _ = await svc.step(True, "acme", "u1", QUERY, context=True)
        assert step.pool == 3
        await step(rows())
        assert step.outcome.applied and step.outcome.candidates == 3 and step.bar is None
    finally:
        await svc.close()
