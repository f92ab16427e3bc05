"""The Embedder deployment in a real (small) Ray Serve: batching, contract, config."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from models import load_encoder

pytestmark = pytest.mark.slow


def test_model_info_and_user_config(embedder_handle) -> None:
    info = embedder_handle.model_info.remote().result()
    assert info["name"] == "all-minilm-l6-v2-int8"
    assert (info["dim"], info["table_slug"], info["device"]) == (
        384,
        "all_minilm_l6_v2_int8",
        "cpu",
    )
    assert info["threads"] == 1  # from the replica's num_cpus
    assert (info["max_batch_size"], info["batch_wait_timeout_s"]) == (8, 0.002)


def test_embed_matches_local_encoder(embedder_handle) -> None:
    local = load_encoder("all-minilm-l6-v2-int8", device="cpu")
    vector = embedder_handle.embed.remote("I love hiking in the Alps.").result()
    assert vector.shape == (384,) and vector.dtype == np.float32
    np.testing.assert_allclose(vector, local.encode(["I love hiking in the Alps."])[0], atol=2e-4)
    many = embedder_handle.embed_many.remote(["a", "b c", "word " * 5000], True).result()
    assert many.shape == (3, 384) and many.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(many, axis=1), 1.0, atol=1e-5)
    assert embedder_handle.embed_many.remote([]).result().shape == (0, 384)


async def test_concurrent_callers_are_batched_and_each_gets_its_own_vector(
    embedder_handle,
) -> None:
    texts = [f"memory number {i} about topic {i % 5}" for i in range(40)]
    local = load_encoder("all-minilm-l6-v2-int8", device="cpu").encode(texts)
    before = await embedder_handle.model_info.remote()
    results = await asyncio.gather(*(embedder_handle.embed.remote(t) for t in texts))
    after = await embedder_handle.model_info.remote()
    got = np.stack(results)
    np.testing.assert_allclose(got, local, atol=2e-4)
    batches = after["batches_run"] - before["batches_run"]
    assert after["texts_embedded"] - before["texts_embedded"] == 40
    assert batches <= 40 // 2  # dynamic batching grouped concurrent calls (max 8 per batch)


def test_replica_threads_fallbacks() -> None:
    from deployments.embedder import replica_threads
    from models.encoder import default_threads

    assert replica_threads(3) == 3  # MEMSERVE_EMBED_THREADS wins
    # Outside a replica (the test driver has no assigned CPUs): the OS's CPUs.
    assert replica_threads(None) == default_threads()
