"""deployments.encoders: the Embedder and the Retriever load their encoders the same way."""

from __future__ import annotations

from deployments.encoders import encoder_options, replica_encoders
from serve_app.settings import Settings


def test_both_deployments_get_one_model_object_and_a_missing_ref_means_the_setting() -> None:
    settings = Settings().with_(embed={"device": "cpu", "threads": 1})
    retriever_side = replica_encoders(settings, [""])  # ModelFacts without a ref
    embedder_side = replica_encoders(settings, [settings.embed.model])
    assert retriever_side.default is embedder_side.default  # one object, not a copy
    assert embedder_side.default.spec.name == settings.embed.model
    options = encoder_options(settings, device="cuda")
    assert options.device == "cuda" and options.threads == 1  # the argument wins
