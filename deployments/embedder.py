"""Embedder deployment: dynamic batching around :class:`models.Encoder`.

Scaling lives in the Serve config (``num_replicas``/``autoscaling_config``,
``ray_actor_options.num_cpus``/``num_gpus``); nothing here hard-codes it.

Batching: ``embed`` calls from all callers are queued by ``@serve.batch`` and
run together (up to ``max_batch_size`` texts, waiting at most
``batch_wait_timeout_s`` for the batch to fill); the encoder then sorts the
batch by length and splits it into sub-batches capped by padded tokens
(``embed_max_batch_tokens``), so short messages are not padded to long ones.

Several models: callers may name the model (``model``: a spec name or model directory);
``None`` is the configured one. During a model change the replica serves the old model
(queries, dedup) and the new one (re-embedding) side by side, each text with its own
(``models.encoder_set.EncoderSet``); ``preload`` loads them at start.

A caller that finds the encoder idle and nobody queued runs at once, without the
batch queue's fill wait (one client, or the first caller after a lull).

Batches are formed greedily: while a batch computes, new callers park at a
gate in :meth:`Embedder.embed` instead of entering ``@serve.batch``'s queue,
and are all released into it when the batch ends. Without the gate Serve cuts
a new batch every ``batch_wait_timeout_s`` whether or not the encoder is free,
so under load the encoder runs a backlog of tiny batches (about
``batch_wait_timeout_s`` worth of arrivals each) instead of one batch of
everything that queued while it was busy. With the gate the wait only matters
when the encoder is idle, so it can stay short (a few ms at most).

``embed_many`` is one call per request: a short list (under ``OWN_RUN_MIN_TEXTS``)
joins the shared batch text by text; a longer one waits for the encoder to be free
and takes it for one run of its own (the gate stays closed meanwhile, so concurrent
callers queue for the run after it) instead of costing a batch-queue entry per text.

Two lanes (``models/lanes.py``): ``embed`` and ``embed_many`` are interactive;
``embed_many(..., bulk=True)`` (document chunks, re-embedding, imports) is bulk: cut
into length-sorted slices of at most ``MEMSERVE_EMBED_BULK_SLICE_TOKENS`` padded tokens
and ``MEMSERVE_EMBED_BULK_SLICE_TEXTS`` texts, each started only when no interactive
caller is inside (at the gate, in the batch queue or running), or once it has waited
``MEMSERVE_EMBED_BULK_MAX_WAIT_S``. A memory write then waits for one slice at most
instead of a whole document's run.

``max_ongoing_requests`` defaults to 2 x the default ``max_batch_size`` (64):
one full batch runs while the next one queues, and a replica never accepts
more than it can batch, so excess load waits in the caller's queue where the
autoscaler sees it. Raise it with ``max_batch_size`` (keep it >= 2x) in the
Serve config.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from ray import serve

from deployments.encoders import replica_encoders, replica_threads
from models import Encoder
from models.lanes import EncoderLanes, plan_slices
from serve_app.metrics import EmbedMetrics, Flusher
from serve_app.settings import EmbedSettings, get_settings

log = logging.getLogger("ray.serve")

# Class-level defaults of the decorators come from the settings' defaults (stated once);
# __init__ and reconfigure apply the configured values.
DEFAULT_MAX_BATCH_SIZE = EmbedSettings.model_fields["max_batch_size"].default
DEFAULT_BATCH_WAIT_S = EmbedSettings.model_fields["batch_wait_s"].default
DEFAULT_MAX_ONGOING_REQUESTS = 2 * DEFAULT_MAX_BATCH_SIZE
OWN_RUN_MIN_TEXTS = 8  # embed_many lists this long run alone rather than text by text


@serve.deployment(max_ongoing_requests=DEFAULT_MAX_ONGOING_REQUESTS)
class Embedder:
    """Texts to vectors for the configured model (``MEMSERVE_EMBED_MODEL``)."""

    def __init__(
        self, model: str | None = None, device: str | None = None, preload: Sequence[str] = ()
    ) -> None:
        settings = get_settings()
        self._threads = replica_threads(settings.embed.threads)
        started = time.perf_counter()
        # The configured model first, then the active and filling ones of a model change.
        self.encoders = replica_encoders(
            settings, [model or settings.embed.model, *preload], device
        )
        self.encoder: Encoder = self.encoders.default
        # One worker thread: batches run one at a time off the event loop, so
        # the next batch keeps filling while this one computes.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")
        # Closed while an encoder run computes: callers wait here, then join the next
        # batch together (see the module docstring). Binds to a loop at its first wait.
        self._gate = asyncio.Event()
        self._gate.set()
        self._queued = 0  # callers inside the batch queue (not yet answered)
        self._embed_batch.set_max_batch_size(settings.embed.max_batch_size)
        self._embed_batch.set_batch_wait_timeout_s(settings.embed.batch_wait_s)
        self.metrics = EmbedMetrics(self.encoder.spec.name)
        # Encoder runs and interactive callers are counted here; bulk slices wait on it.
        self.lanes = EncoderLanes(settings.embed.bulk_max_wait_s, observer=self.metrics)
        self._slice_tokens = settings.embed.bulk_slice_tokens
        self._slice_texts = settings.embed.bulk_slice_texts
        self._flusher = Flusher([self.metrics])  # starts with the first run (needs the loop)
        self._batches = 0
        self._texts = 0
        log.info(
            "embedder %s ready on %s, %d threads, load and warm-up %.0f ms",
            self.encoder.spec.name,
            self.encoder.device,
            self._threads,
            (time.perf_counter() - started) * 1000,
        )

    async def _ensure(self, model: str | None) -> None:
        """Load a model no caller named before, off the event loop (first use only)."""
        if model not in self.encoders:
            encoder = await asyncio.to_thread(self.encoders.get, model)
            await asyncio.to_thread(encoder.warmup)

    @serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_S)
    async def _embed_batch(
        self,
        texts: list[str],
        is_query: list[bool],
        enqueued: list[float],
        models: list[str | None],
    ) -> list[np.ndarray]:
        return list(await self._run(list(texts), list(is_query), enqueued, list(models)))

    async def _run(
        self,
        texts: list[str],
        is_query: list[bool],
        enqueued: list[float],
        models: list[str | None],
    ) -> Any:
        """One encoder run off the event loop, the gate closed while it computes.

        Counted as running from the call (before any await: the lanes rely on it) until
        the thread is done, even when the caller is cancelled meanwhile: the encoder is
        busy until then, and a bulk slice must not start on that."""
        started = time.perf_counter()
        self.lanes.run_started()
        self._gate.clear()
        future = asyncio.get_running_loop().run_in_executor(
            self._pool, self.encoders.encode_mixed, texts, is_query, models
        )
        try:
            vectors = await asyncio.shield(future)
        finally:
            if future.done():
                self._run_ended()
            else:
                future.add_done_callback(self._run_ended)
        self.metrics.batch(len(texts), started, time.perf_counter(), enqueued)
        self._batches += 1
        self._texts += len(texts)
        self._flusher.start()
        return vectors

    def _run_ended(self, future: asyncio.Future[Any] | None = None) -> None:
        if future is not None and not future.cancelled():
            future.exception()  # retrieved: a cancelled caller's failed run is not logged as lost
        self.lanes.run_ended()
        if not self.lanes.running:
            self._gate.set()

    async def embed(
        self, text: str, is_query: bool = False, model: str | None = None
    ) -> np.ndarray:
        """One text to a 1-D float32 vector, batched with concurrent callers."""
        await self._ensure(model)
        with self.lanes.interactive():
            now = time.perf_counter()
            if not self.lanes.running and not self._queued:
                # Idle encoder, nobody queued: run now. The batch queue would only add its
                # fill wait (no one else is coming); callers that arrive meanwhile find the
                # gate closed and batch together after this run.
                return (await self._run([text], [bool(is_query)], [now], [model]))[0]
            return await self._enqueue(text, bool(is_query), now, model)

    async def _enqueue(
        self, text: str, is_query: bool, now: float, model: str | None
    ) -> np.ndarray:
        """Join the shared batch: after the run computing now, if any; counted as queued
        so an idle-looking encoder is not taken ahead of texts already waiting."""
        self._queued += 1
        try:
            if not self._gate.is_set():  # a run computes: join the batch after it
                await self._gate.wait()
            return await self._embed_batch(text, is_query, now, model)
        finally:
            self._queued -= 1

    async def embed_many(
        self,
        texts: list[str],
        is_query: bool = False,
        model: str | None = None,
        bulk: bool = False,
    ) -> np.ndarray:
        """Several texts to one (n, dim) float32 array (see the module docstring);
        ``bulk``: the bulk lane (sliced, after interactive callers)."""
        await self._ensure(model)
        now, n = time.perf_counter(), len(texts)
        if not n:
            return np.zeros((0, self.encoders.get(model).spec.dim), dtype=np.float32)
        if bulk:
            return await self._bulk(list(texts), bool(is_query), model)
        with self.lanes.interactive():
            if n >= OWN_RUN_MIN_TEXTS:
                while self.lanes.running:  # one run at a time: wait out the one computing
                    await self._gate.wait()
                return await self._run(list(texts), [bool(is_query)] * n, [now] * n, [model] * n)
            rows = await asyncio.gather(
                *(self._enqueue(t, bool(is_query), now, model) for t in texts)
            )
            return np.stack(rows).astype(np.float32, copy=False)

    async def _bulk(self, texts: list[str], is_query: bool, model: str | None) -> np.ndarray:
        """The bulk lane: token counts (a worker thread), slices, each run in its turn."""
        encoder = self.encoders.get(model)
        lengths = await asyncio.to_thread(encoder.token_counts, texts, is_query=is_query)
        tokens = self._slice_tokens or encoder.max_batch_tokens  # default: one encoder run
        slices = plan_slices(lengths, max_tokens=tokens, max_texts=self._slice_texts)

        def run(rows: list[int]) -> Any:
            # No queue-wait samples: a slice's wait is memserve_embed_bulk_wait_ms, and
            # seconds of bulk waiting would drown the interactive callers' queue waits.
            k = len(rows)
            return self._run([texts[i] for i in rows], [is_query] * k, [], [model] * k)

        return await self.lanes.run_bulk(len(texts), slices, run, encoder.spec.dim)

    def model_info(self) -> dict[str, Any]:
        spec = self.encoder.spec
        return {
            "name": spec.name,
            "dim": spec.dim,
            "table_slug": spec.table_slug,
            "device": self.encoder.device,
            "pooling": spec.pooling,
            "max_tokens": spec.max_tokens,
            "query_prefix": spec.query_prefix,
            "threads": self._threads,
            "max_batch_size": self._embed_batch._get_max_batch_size(),
            "batch_wait_timeout_s": self._embed_batch._get_batch_wait_timeout_s(),
            "own_run_min_texts": OWN_RUN_MIN_TEXTS,
            "bulk_slice_tokens": self._slice_tokens or self.encoder.max_batch_tokens,
            "bulk_slice_texts": self._slice_texts,
            "bulk_max_wait_s": self.lanes.max_wait_s,
            "bulk_slices_run": self.lanes.slices_run,
            "bulk_slices_overdue": self.lanes.overdue_slices,
            "pid": os.getpid(),
            "batches_run": self._batches,
            "texts_embedded": self._texts,
            "models": sorted({e.spec.name for e in self.encoders.loaded()}),
        }

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve ``user_config``: max_batch_size, batch_wait_timeout_s, max_batch_tokens,
        and the bulk lane's bulk_slice_tokens, bulk_slice_texts, bulk_max_wait_s."""
        config = config or {}
        if "bulk_slice_tokens" in config:
            tokens = config["bulk_slice_tokens"]
            self._slice_tokens = None if tokens is None else max(1, int(tokens))
        if "bulk_slice_texts" in config:
            self._slice_texts = max(1, int(config["bulk_slice_texts"]))
        if "bulk_max_wait_s" in config:
            self.lanes.max_wait_s = max(0.0, float(config["bulk_max_wait_s"]))
        if "max_batch_size" in config:
            self._embed_batch.set_max_batch_size(int(config["max_batch_size"]))
        if "batch_wait_timeout_s" in config:
            self._embed_batch.set_batch_wait_timeout_s(float(config["batch_wait_timeout_s"]))
        if "max_batch_tokens" in config:
            for encoder in self.encoders.loaded():
                encoder.max_batch_tokens = int(config["max_batch_tokens"])

    async def __del__(self) -> None:
        await self._flusher.stop()  # the last aggregates, best effort
        self._pool.shutdown(wait=False)
