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
    assert_rows_match(np.stack(results), local)
    batches = after["batches_run"] - before["batches_run"]
    assert after["texts_embedded"] - before["texts_embedded"] == 40
    assert batches <= 40 // 2  # dynamic batching grouped concurrent calls (max 8 per batch)


async def test_embed_many_is_one_call_and_one_encoder_run(embedder_handle) -> None:
    texts = [f"memory number {i} about topic {i % 5}" for i in range(100)]
    local = load_encoder("all-minilm-l6-v2-int8", device="cpu").encode(texts)
    before = await embedder_handle.model_info.remote()
    got = await embedder_handle.embed_many.remote(texts)
    after = await embedder_handle.model_info.remote()
    assert got.shape == (100, 384) and got.dtype == np.float32
    assert_rows_match(got, local)
    # Not 100 batch-queue entries cut into batches of 8 (the fixture's max_batch_size).
    assert after["batches_run"] - before["batches_run"] == 1
    assert after["texts_embedded"] - before["texts_embedded"] == 100


def test_the_bulk_lane_answers_the_same_vectors_in_order(embedder_handle) -> None:
    """Issue 33: a bulk list is sliced (length-sorted, a few runs) but answered in the
    caller's order with the vectors the interactive lane gives."""
    texts = [f"chunk {i}: " + "policy words " * (i * 37 % 120) for i in range(20)]
    before = embedder_handle.model_info.remote().result()
    bulk = embedder_handle.embed_many.remote(texts, False, None, True).result()
    plain = embedder_handle.embed_many.remote(texts, False, None).result()
    after = embedder_handle.model_info.remote().result()
    assert bulk.shape == (20, 384) and bulk.dtype == np.float32
    assert_rows_match(bulk, plain)
    assert after["bulk_slices_run"] - before["bulk_slices_run"] >= 3  # 512-token slices
    assert after["bulk_slice_tokens"] == 512  # default: the CPU encoder's run size
    assert embedder_handle.embed_many.remote([], False, None, True).result().shape == (0, 384)


def assert_rows_match(got: np.ndarray, want: np.ndarray) -> None:
    """Row i is text i's vector: the int8 copy quantises activations per run, so a text's
    vector shifts slightly with its batch-mates (cosine >= 0.98), but stays nearest its own."""
    cosines = got @ want.T
    assert np.diag(cosines).min() >= 0.98
    np.testing.assert_array_equal(cosines.argmax(axis=1), np.arange(len(want)))


def test_replica_threads_fallbacks() -> None:
    from deployments.embedder import replica_threads
    from models.encoder import default_threads

    assert replica_threads(3) == 3  # MEMSERVE_EMBED_THREADS wins
    # Outside a replica (the test driver has no assigned CPUs): the OS's CPUs.
    assert replica_threads(None) == default_threads()


def _bare_embedder(monkeypatch, batch_wait_s: float = 0.001, slice_texts: int = 32):
    """An Embedder outside Ray with a slow fake encoder (0.1 s a run) and a metrics sink."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from ray.serve import batching

    from deployments.embedder import Embedder
    from models.encoder_set import EncoderSet
    from models.lanes import EncoderLanes
    from serve_app.metrics import EmbedMetrics, Flusher
    from serve_app.testing.metrics_sink import Recorder

    # Outside a replica there is no max_ongoing_requests to compare max_batch_size with.
    monkeypatch.setattr(
        batching._BatchQueue,
        "_warn_if_max_batch_size_exceeds_max_ongoing_requests",
        lambda self: None,
    )

    class SlowEncoder:
        class spec:  # noqa: N801
            dim, name = 2, "slow"

        def __init__(self) -> None:
            self.batches: list[int] = []

        def encode_mixed(self, texts: list[str], is_query: list[bool]) -> np.ndarray:
            self.batches.append(len(texts))
            time.sleep(0.1)
            return np.ones((len(texts), 2), dtype=np.float32)

        def token_counts(self, texts: list[str], *, is_query: bool = False) -> list[int]:
            return [len(t.split()) + 2 for t in texts]

    embedder = Embedder.func_or_class.__new__(Embedder.func_or_class)
    embedder.encoder = SlowEncoder()
    embedder.encoders = EncoderSet(embedder.encoder, lambda ref: embedder.encoder)
    embedder._pool = ThreadPoolExecutor(max_workers=1)
    embedder._gate = asyncio.Event()
    embedder._gate.set()
    embedder._queued = embedder._batches = embedder._texts = 0
    embedder.metrics = EmbedMetrics("slow")
    embedder.lanes = EncoderLanes(5.0, observer=embedder.metrics)
    embedder._slice_tokens, embedder._slice_texts = 2048, slice_texts
    embedder._flusher = Flusher([embedder.metrics], interval_s=60)
    embedder._flusher.sink = sink = Recorder()
    embedder._embed_batch.set_max_batch_size(8)
    embedder._embed_batch.set_batch_wait_timeout_s(batch_wait_s)

    return embedder, sink


def _drop_batch_queue() -> None:
    # The batch queue lives on the class: drop the one this process just made
    # (it holds futures), or later tests could not pickle Embedder for Ray.
    from deployments.embedder import Embedder

    for wrapper in _batch_queue_wrappers(Embedder.func_or_class._embed_batch):
        if wrapper._queue is not None and wrapper._queue._handle_batch_task is not None:
            wrapper._queue._handle_batch_task.cancel()  # its loop task: stop what we started
        wrapper._queue = None


async def test_a_caller_on_an_idle_encoder_skips_the_batch_fill_wait(monkeypatch) -> None:
    """One client: no batch-queue wait (here 2 s) before its run."""
    import time

    embedder, _ = _bare_embedder(monkeypatch, batch_wait_s=2.0)
    try:
        started = time.perf_counter()
        vector = await embedder.embed("alone")
        elapsed = time.perf_counter() - started
    finally:
        await embedder._flusher.stop()
        _drop_batch_queue()
    assert vector.shape == (2,) and embedder.encoder.batches == [1]
    assert elapsed < 1.0, elapsed  # one 0.1 s run, not the 2 s fill wait


@pytest.mark.parametrize("own_run", [False, True])
async def test_callers_arriving_during_a_run_wait_and_join_the_next_one(
    monkeypatch, own_run: bool
) -> None:
    """The gate: Serve alone would cut a batch every batch_wait_timeout_s while one runs."""
    embedder, sink = _bare_embedder(monkeypatch)

    async def late(i: int) -> np.ndarray:
        await asyncio.sleep(0.01 + i * 0.001)  # all arrive while the first run computes
        return await embedder.embed(f"text {i}")

    try:
        if own_run:  # a long list takes the encoder for one run of its own
            first = asyncio.ensure_future(embedder.embed_many([f"m{i}" for i in range(30)]))
        else:
            first = asyncio.ensure_future(embedder.embed("first"))
        rest = await asyncio.gather(*(late(i) for i in range(20)))
        head = await first
    finally:
        await embedder._flusher.stop()  # the last flush, and no Periodic left running
        _drop_batch_queue()
    assert len(rest) == 20 and all(v.shape == (2,) for v in rest)
    first_run = 30 if own_run else 1
    assert head.shape == ((30, 2) if own_run else (2,))
    assert embedder.encoder.batches[0] == first_run
    # Without the gate: [1, 2, 3, 2, 3, 2, ...] (a batch per millisecond of arrivals).
    assert sum(embedder.encoder.batches) == 20 + first_run
    assert len(embedder.encoder.batches) <= 4, embedder.encoder.batches
    # The local aggregates reached the sink at stop: every text, every run.
    assert sink.counters == {("memserve_embed_texts", ("slow",)): 20 + first_run}
    runs = [n for name, _, _, n in sink.observations if name == "memserve_embed_batch_size"]
    assert sum(runs) == len(embedder.encoder.batches)


async def test_a_bulk_list_runs_in_slices_and_interactive_callers_go_between(
    monkeypatch,
) -> None:
    """The bulk lane (issue 33): 12 chunks in slices of 4; five memory writes that arrive
    while slice 0 computes run right after it, before slices 1 and 2."""
    import time

    embedder, sink = _bare_embedder(monkeypatch, slice_texts=4)
    waits: list[float] = []

    async def write(i: int) -> np.ndarray:
        await asyncio.sleep(0.03 + i * 0.001)  # while slice 0 computes
        started = time.perf_counter()
        vector = await embedder.embed(f"memory {i}")
        waits.append(time.perf_counter() - started)
        return vector

    try:
        bulk = asyncio.ensure_future(
            embedder.embed_many([f"chunk {i} " * (i + 1) for i in range(12)], bulk=True)
        )
        rest = await asyncio.gather(*(write(i) for i in range(5)))
        vectors = await bulk
    finally:
        await embedder._flusher.stop()
        _drop_batch_queue()
    assert vectors.shape == (12, 2) and all(v.shape == (2,) for v in rest)
    assert embedder.encoder.batches == [4, 5, 4, 4]  # slice, the writes, slice, slice
    assert max(waits) < 0.35, waits  # one slice and their own run, not the whole list
    assert embedder.lanes.slices_run == 3 and embedder.lanes.running == 0
    assert sink.counters[("memserve_embed_bulk_slices", ("slow", "idle"))] == 3
    assert sink.counters[("memserve_embed_interactive_behind_bulk", ("slow",))] == 5


async def test_a_cancelled_bulk_caller_runs_no_further_slice(monkeypatch) -> None:
    embedder, _ = _bare_embedder(monkeypatch, slice_texts=2)
    try:
        bulk = asyncio.ensure_future(
            embedder.embed_many([f"chunk {i}" for i in range(8)], bulk=True)
        )
        await asyncio.sleep(0.05)  # slice 0 computes
        bulk.cancel()
        with pytest.raises(asyncio.CancelledError):
            await bulk
        assert embedder.lanes.running == 1  # its thread still computes: still counted
        await asyncio.sleep(0.3)
    finally:
        await embedder._flusher.stop()
        _drop_batch_queue()
    assert embedder.encoder.batches == [2] and embedder.lanes.running == 0
    assert embedder._gate.is_set()


def _batch_queue_wrappers(fn, seen=None):
    """The @serve.batch queue holders reachable through ``fn``'s closures."""
    from ray.serve import batching

    seen = set() if seen is None else seen
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, batching._LazyBatchQueueWrapper):
            yield value
        elif callable(value):
            yield from _batch_queue_wrappers(value, seen)
