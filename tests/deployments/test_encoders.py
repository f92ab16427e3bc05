"""deployments.encoders: the Embedder and the Retriever load their encoders the same way."""

from __future__ import annotations

import pytest

from deployments.encoders import encoder_options, replica_encoders
from models.encoder import DeviceUnavailableError
from models.torch_backend import TorchEncoder
from serve_app.settings import Settings


def test_both_deployments_get_one_model_object_and_a_missing_ref_means_the_setting() -> None:
    settings = Settings().with_(embed={"device": "cpu", "threads": 1})
    retriever_side = replica_encoders(settings, [""])  # ModelFacts without a ref
    embedder_side = replica_encoders(settings, [settings.embed.model])
    assert retriever_side.default is embedder_side.default  # one object, not a copy
    assert embedder_side.default.spec.name == settings.embed.model
    options = encoder_options(settings, device="cuda")
    assert options.device == "cuda" and options.threads == 1  # the argument wins


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_a_replica_asked_for_cuda_without_it_fails_at_start(backend: str) -> None:
    """MEMSERVE_EMBED_DEVICE=cuda on this CPU machine: a clear error before any model loads."""
    settings = Settings().with_(embed={"device": "cuda", "backend": backend, "threads": 1})
    with pytest.raises(DeviceUnavailableError, match="CUDA"):
        replica_encoders(settings, [settings.embed.model])


def test_the_torch_backend_is_chosen_by_the_settings(torch_weights, monkeypatch) -> None:
    monkeypatch.setenv("MEMSERVE_EMBED_BACKEND", "torch")
    monkeypatch.setenv("MEMSERVE_EMBED_TORCH_WEIGHTS", str(torch_weights))
    settings = Settings().with_(embed={"device": "cpu", "threads": 1})
    assert settings.embed.backend == "torch"
    encoders = replica_encoders(settings, [settings.embed.model])
    assert isinstance(encoders.default, TorchEncoder)
    assert encoders.default.spec.name == settings.embed.model
    assert encoders.default.weights_dir == torch_weights
