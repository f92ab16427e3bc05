"""The re-scoring back-ends on their own: the ONNX cross-encoder (a tiny BERT built at
test time, no download) against its torch original, and the LLM scorer against the
scripted LLM, metered; the fallbacks keep the search order and say why."""

from __future__ import annotations

import json

import pytest

from serve_app.llm.client import LLMClient
from serve_app.retrieval.rerank import (
    RERANK_MARKER,
    CrossEncoder,
    Fallback,
    Reranker,
    RerankUnavailable,
    build_reranker,
    parse_scores,
)
from serve_app.settings import LLMSettings, RerankSettings, SpendSettings
from serve_app.spend.meter import SpendMeter
from serve_app.store.llm_spend import CallTag
from serve_app.testing.cross_encoder import build_cross_encoder, torch_scores

QUERY = "How do I charge my car on a long road trip?"
TEXTS = [
    "The user likes coffee",
    "I drive a Tesla Model 3",
    "I have two cats",
    "My running shoes are new",
    "I am learning Python",
]
TAG = CallTag("acme", "u1", "rerank")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("xenc"))


@pytest.fixture(scope="module")
def two_label_dir(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("xenc2"), num_labels=2)


def rows(texts=TEXTS):
    return [{"id": f"m{i}", "content": t, "score": 1.0 - i / 10} for i, t in enumerate(texts)]


def test_onnx_scores_are_the_torch_models_in_batches_with_padding(model_dir):
    # batch_size 2 over 5 texts of different lengths: three runs, each padded to its longest
    enc = CrossEncoder(model_dir, batch_size=2)
    got = enc.score_sync(QUERY, TEXTS)
    want = torch_scores(model_dir, QUERY, TEXTS)
    assert got == pytest.approx(want, abs=1e-4)
    assert len(set(round(s, 4) for s in got)) > 1  # the pairs are told apart


def test_two_label_head_ranks_by_the_relevant_logit(two_label_dir):
    enc = CrossEncoder(two_label_dir, batch_size=3)
    want = torch_scores(two_label_dir, QUERY, TEXTS, num_labels=2)
    assert enc.score_sync(QUERY, TEXTS) == pytest.approx(want, abs=1e-4)


def test_missing_files_fail_at_start(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.onnx"):
        CrossEncoder(tmp_path)


async def test_reranker_orders_the_head_by_score_and_keeps_the_tail(model_dir):
    settings = RerankSettings(backends=["onnx"], onnx_dir=model_dir, max_candidates=3)
    reranker = build_reranker(settings, None)
    try:
        out, outcome = await reranker.rerank(rows(), QUERY, "onnx", TAG)
    finally:
        await reranker.close()
    scores = CrossEncoder(model_dir).score_sync(QUERY, TEXTS[:3])
    head = sorted(range(3), key=lambda i: -scores[i])
    assert [r["id"] for r in out] == [f"m{i}" for i in head] + ["m3", "m4"]
    assert [r["rerank_score"] for r in out[:3]] == pytest.approx(sorted(scores, reverse=True))
    assert "rerank_score" not in out[3]  # past max_candidates: not scored
    assert outcome.applied and outcome.backend == "onnx" and outcome.candidates == 3
    assert reranker.metrics.calls.totals == {("onnx", "ok"): 1}


def test_choose_offers_only_what_the_operator_built_and_the_tenant_allows(model_dir):
    reranker = build_reranker(RerankSettings(backends=["onnx"], onnx_dir=model_dir), None)
    assert reranker.choose(False) is None
    assert reranker.choose(True) == "onnx"
    assert reranker.choose("onnx", {"onnx", "llm"}) == "onnx"
    with pytest.raises(RerankUnavailable, match="'llm' is not enabled"):
        reranker.choose("llm")  # the tenant may name it; the operator did not offer it
    with pytest.raises(RerankUnavailable, match="no back-end"):
        reranker.choose(True, {"llm"})
    with pytest.raises(RerankUnavailable, match="no back-end"):
        Reranker(RerankSettings(), {}).choose(True)


def test_settings_naming_a_backend_without_its_parts_fail_at_start():
    with pytest.raises(ValueError, match="ONNX_DIR"):
        build_reranker(RerankSettings(backends=["onnx"]), None)
    with pytest.raises(ValueError, match="LLM_BASE_URL"):
        build_reranker(RerankSettings(backends=["llm"]), None)


@pytest.mark.parametrize(
    "content",
    [
        '{"scores": [1, 2]}',
        '{"scores": [1, "2", 3]}',
        '{"scores": [1, true, 3]}',
        "not json",
        '{"score": [1, 2, 3]}',
        '{"scores": [1, 2, NaN]}',
    ],
)
def test_malformed_llm_answers_are_a_fallback(content):
    with pytest.raises(Fallback, match="llm_malformed"):
        parse_scores(content, 3)


@pytest.fixture
async def llm_reranker(llm):
    meter = SpendMeter(None, SpendSettings())
    client = LLMClient(LLMSettings(base_url=llm.url, model="fake", max_retries=0), meter=meter)
    reranker = build_reranker(RerankSettings(backends=["llm"], max_candidates=4), client)
    yield reranker, meter
    await reranker.close()
    await meter.aclose()


async def test_llm_scores_order_the_candidates_in_one_metered_call(llm, llm_reranker):
    reranker, meter = llm_reranker
    llm.add_rule(RERANK_MARKER, json.dumps({"scores": [1, 9, 0, 2]}), kind=None)
    out, outcome = await reranker.rerank(rows(), QUERY, "llm", TAG)
    assert [r["id"] for r in out] == ["m1", "m3", "m0", "m2", "m4"]
    assert outcome.applied and outcome.candidates == 4
    (call,) = llm.calls()
    prompt = call["messages"][-1]["content"]
    assert QUERY in prompt and "[1] I drive a Tesla Model 3" in prompt
    assert TEXTS[4] not in prompt  # past max_candidates: never shown to the LLM
    assert meter.metrics.counts["calls_rerank"] == 1  # metered under its own purpose


async def test_llm_down_or_malformed_keeps_the_order_and_says_why(llm, llm_reranker):
    reranker, _ = llm_reranker
    llm.add_rule(RERANK_MARKER, '{"scores": [1]}', kind=None)
    out, outcome = await reranker.rerank(rows(), QUERY, "llm", TAG)
    assert [r["id"] for r in out] == [f"m{i}" for i in range(5)]
    assert (outcome.applied, outcome.reason) == (False, "llm_malformed")
    llm.down()
    out, outcome = await reranker.rerank(rows(), QUERY, "llm", TAG)
    assert [r["id"] for r in out] == [f"m{i}" for i in range(5)]
    assert (outcome.applied, outcome.reason) == (False, "llm_unavailable")
    assert reranker.metrics.calls.totals == {
        ("llm", "llm_malformed"): 1,
        ("llm", "llm_unavailable"): 1,
    }
