"""Sentence encoder on ONNX Runtime + Hugging Face tokenizers (no torch at run time).

Plain Python, no Ray: :mod:`deployments.embedder` wraps it for Serve. Building one from
files is :mod:`models.session` (a graph as it is) and :mod:`models.loader` (a spec, its
verified int8 copy included); this module imports neither, so both can import it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np

from models.batching import plan_batches, spread_batches
from models.spec import ModelSpec, Pooling
from models.views import Spans, pool_views, view_text, view_weights

Device = Literal["auto", "cpu", "cuda"]
CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"

#: Padded tokens per ONNX Runtime run when not set. On CPU a run's activations
#: should fit the core's cache: with 512 tokens the largest ones of a MiniLM/BGE
#: layer (FFN 512 x 1536 floats, or 2 x 12 heads x 192^2 attention scores of two
#: 200-token texts) are ~3 MB, and long texts embed ~1.5x faster than in one
#: 32 x 200 run (loadtests/bench_embed.py); short texts are not slower. A GPU
#: wants big runs.
CPU_BATCH_TOKENS = 512
GPU_BATCH_TOKENS = 16384

# Tokenizing is linear in characters even though the result is truncated;
# no WordPiece token is longer than 100 characters, so this bounds the work
# for pathological inputs without changing what a normal text encodes to.
_CHARS_PER_TOKEN_CAP = 64


class DeviceUnavailableError(RuntimeError):
    """``device="cuda"`` was asked for but CUDA cannot be used."""


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: Pooling) -> np.ndarray:
    """Sentence vectors from token vectors: CLS (first token) or masked mean."""
    if hidden.ndim != 3:
        raise ValueError(f"expected (batch, tokens, dim) hidden states, got {hidden.shape}")
    hidden = hidden.astype(np.float32, copy=False)
    if pooling == "cls":
        return hidden[:, 0, :]
    if pooling == "mean":
        # (batch, 1, tokens) @ (batch, tokens, dim): one batched GEMV instead of a
        # (batch, tokens, dim) temporary for the masked product.
        weights = mask.astype(np.float32)[:, None, :]
        summed = np.matmul(weights, hidden)[:, 0, :]
        counts = np.clip(weights.sum(axis=2), 1e-9, None)
        return summed / counts
    raise ValueError(f"unknown pooling {pooling!r}")


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.clip(norms, 1e-12, None)


def gpu_visible(env: dict[str, str] | None = None) -> bool:
    """Whether this process may see an NVIDIA GPU (cheap check, no CUDA init)."""
    env = dict(os.environ) if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "NoDevFiles"):
        return False
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def select_providers(
    device: str, available: Sequence[str], has_gpu: bool
) -> list[str | tuple[str, dict[str, Any]]]:
    """ONNX Runtime providers for a device setting.

    ``cpu`` is always CPU; ``cuda`` requires onnxruntime-gpu (``make gpu-install``)
    and fails otherwise; ``auto`` takes CUDA only when the CUDA EP is
    installed and a GPU is visible, else CPU. CPU stays last as fallback for
    nodes CUDA does not implement.
    """
    device = (device or "auto").lower()
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"embed device must be auto, cpu or cuda, not {device!r}")
    if device == "cpu":
        return [CPU_EP]
    if CUDA_EP in available and (has_gpu or device == "cuda"):
        return [(CUDA_EP, {"device_id": 0}), CPU_EP]
    if device == "cuda":
        raise DeviceUnavailableError(
            "embed_device=cuda but onnxruntime has no CUDAExecutionProvider "
            f"(providers: {', '.join(available)}); run `make gpu-install` "
            "(onnxruntime-gpu alone, verified) or set MEMSERVE_EMBED_BACKEND=torch"
        )
    return [CPU_EP]


def default_threads() -> int:
    """CPUs this process may use (affinity-aware), for ONNX Runtime intra-op threads."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Encoder:
    """Texts in, L2-normalised float32 vectors out, for one :class:`ModelSpec`.

    This class runs ONNX Runtime (``backend = "onnx"``); :class:`models.torch_backend.
    TorchEncoder` shares everything but :meth:`_forward` (``MEMSERVE_EMBED_BACKEND``).

    Texts are tokenized with truncation to ``spec.max_tokens`` (never an
    error), sorted by length and run in sub-batches capped by padded tokens.
    Queries get ``spec.query_prefix``; documents get none.

    With ``parallel`` > 1 (CPU: one per thread) the sub-batches of a call run
    concurrently on a single-threaded session, one per CPU, the calling thread
    being one of the runners. For a model this small that uses 2 cores far
    better than ONNX Runtime's intra-op threads, which split every one of the
    ~200 small ops of a run and wait for each other after each (measured on 2
    cores, batch 32: 1.3x over 1 thread with intra-op threads, 1.8x this way).
    """

    backend = "onnx"

    def __init__(
        self,
        spec: ModelSpec,
        session: Any,
        tokenizer: Any,
        *,
        device: str = "cpu",
        max_batch_tokens: int = CPU_BATCH_TOKENS,
        max_batch_size: int = 64,
        onnx_path: Path | None = None,
        parallel: int = 1,
    ) -> None:
        self._init_batching(
            spec,
            tokenizer,
            device=device,
            max_batch_tokens=max_batch_tokens,
            max_batch_size=max_batch_size,
            parallel=parallel,
        )
        self.onnx_path = onnx_path
        self._session = session
        self._input_names = {i.name for i in session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._input_names
        if missing:
            raise ValueError(f"ONNX model of {spec.name} lacks inputs {sorted(missing)}")
        self._output_name, self._pooled = self._pick_output(session)

    def _init_batching(
        self,
        spec: ModelSpec,
        tokenizer: Any,
        *,
        device: str,
        max_batch_tokens: int,
        max_batch_size: int,
        parallel: int,
    ) -> None:
        """What every backend shares: spec, tokenizer, length-sorted sub-batches, runners."""
        self.spec = spec
        self.device = device
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        self.parallel = max(1, int(parallel))
        self._runners = (
            ThreadPoolExecutor(self.parallel - 1, thread_name_prefix="encode-run")
            if self.parallel > 1
            else None
        )
        self._tokenizer = tokenizer
        self._max_chars = spec.max_tokens * _CHARS_PER_TOKEN_CAP

    @staticmethod
    def _pick_output(session: Any) -> tuple[str, bool]:
        outputs = session.get_outputs()
        by_name = {o.name: o for o in outputs}
        if "last_hidden_state" in by_name:
            return "last_hidden_state", False
        for out in outputs:
            if len(out.shape) == 3:
                return out.name, False
        for out in outputs:  # a graph with pooling built in
            if len(out.shape) == 2:
                return out.name, True
        raise ValueError("ONNX model has no (batch, tokens, dim) or (batch, dim) output")

    @property
    def dim(self) -> int:
        return self.spec.dim

    def _prepare(self, texts: Sequence[str], is_query: Sequence[bool]) -> list[str]:
        prefix = self.spec.query_prefix
        out = []
        for text, query in zip(texts, is_query, strict=True):
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
            text = text[: self._max_chars]
            out.append(prefix + text if query and prefix else text)
        return out

    def _encodings(self, texts: Sequence[str], is_query: Sequence[bool]) -> list[Any]:
        """The tokenizer's encodings (ids, offsets, special-token masks), truncated."""
        return self._tokenizer.encode_batch(self._prepare(texts, is_query))

    def _tokenize(self, texts: Sequence[str], is_query: Sequence[bool]) -> list[list[int]]:
        return [e.ids for e in self._encodings(texts, is_query)]

    def token_counts(self, texts: Sequence[str], *, is_query: bool = False) -> list[int]:
        """Tokens each text runs as (special tokens included, after truncation)."""
        return [len(ids) for ids in self._tokenize(texts, [is_query] * len(texts))]

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """Embed texts: shape (n, dim), float32, L2-normalised when the spec says so."""
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not one str")
        return self.encode_mixed(texts, [is_query] * len(texts))

    @property
    def pools_views(self) -> bool:
        """Whether a view's vector comes from its text's run (mean pooling over token
        vectors); otherwise :meth:`encode_views` encodes each view as a text of its own."""
        return self.spec.pooling == "mean" and not getattr(self, "_pooled", False)

    def encode_mixed(self, texts: Sequence[str], is_query: Sequence[bool]) -> np.ndarray:
        """Embed texts where each one is a query or a document (one Serve batch)."""
        out = np.zeros((len(texts), self.spec.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self._tokenize(texts, is_query)
        self._run_all(ids, None, lambda rows, vecs: out.__setitem__(rows, vecs))
        return out

    def encode_views(
        self, texts: Sequence[str], views: Sequence[Sequence[Spans]], *, is_query: bool = False
    ) -> list[np.ndarray]:
        """Each text's vector and its views' vectors: per text a (1 + len(its views), dim)
        array, row 0 the text's own vector (as :meth:`encode` gives it), then one row per
        view: the mean over the tokens of the text that overlap the view's character
        spans (special tokens and the query prefix included), taken from the same run.

        Why: a context search also asks for a text without some of its words (the context's
        time-free cosine); pooled from the text's run that costs no second encoding
        (~0.2 ms of CPU per padded token on this box). The view's tokens were read in
        the whole text's context, so its vector is close to, not equal to, the view
        encoded alone; a backend that cannot pool views (CLS pooling, a graph with
        pooling built in) encodes :func:`view_text` of each view instead."""
        if len(views) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(views)} view lists")
        if not self.pools_views:
            pairs = zip(texts, views, strict=True)
            flat = list(texts) + [view_text(t, sp) for t, vs in pairs for sp in vs]
            vecs, out, k = self.encode(flat, is_query=is_query), [], len(texts)
            for i, vs in enumerate(views):
                out.append(np.concatenate([vecs[i : i + 1], vecs[k : k + len(vs)]]))
                k += len(vs)
            return out
        if not texts:
            return []
        shift = len(self.spec.query_prefix) if is_query and self.spec.query_prefix else 0
        encodings = self._encodings(texts, [is_query] * len(texts))
        ids = [e.ids for e in encodings]
        weights = [
            view_weights(e.offsets, e.special_tokens_mask, vs, shift)
            for e, vs in zip(encodings, views, strict=True)
        ]
        width = 1 + max(len(vs) for vs in views)
        out = np.zeros((len(texts), width, self.spec.dim), dtype=np.float32)

        def store(rows: list[int], vecs: np.ndarray) -> None:
            out[rows, : vecs.shape[1]] = vecs  # a run holds as many views as its texts

        self._run_all(ids, weights, store)
        return [out[i, : 1 + len(vs)] for i, vs in enumerate(views)]

    def _run_all(
        self,
        ids: list[list[int]],
        weights: list[np.ndarray] | None,
        store: Any,
    ) -> None:
        """Every text run in length-sorted sub-batches; ``store(rows, vectors)`` per run."""
        lengths = [len(x) for x in ids]
        plan = plan_batches(
            lengths, max_batch_tokens=self.max_batch_tokens, max_batch_size=self.max_batch_size
        )

        def run(rows: list[int]) -> None:
            w = [weights[i] for i in rows] if weights is not None else None
            store(rows, self._run([ids[i] for i in rows], w))

        if self._runners is None:
            for rows in plan:
                run(rows)
            return
        # Runs sized for the runners, the costliest first so the last ones are short.
        plan = spread_batches(plan, lengths, self.parallel)
        pending = iter(plan)
        lock = threading.Lock()

        def drain() -> None:
            while True:
                with lock:
                    rows = next(pending, None)
                if rows is None:
                    return
                run(rows)

        # A one-run plan (a single query) stays on this thread: no handoff.
        helpers = [self._runners.submit(drain) for _ in range(min(self.parallel, len(plan)) - 1)]
        try:
            drain()
        finally:
            for helper in helpers:
                helper.result()

    def _run(self, ids: list[list[int]], weights: list[np.ndarray] | None = None) -> np.ndarray:
        """One padded run: (rows, dim) vectors, or with ``weights`` (each text's (views,
        tokens) pooling rows) (rows, most views, dim), missing views zero."""
        width = max(len(x) for x in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        pool_w = None
        if weights is not None:
            pool_w = np.zeros((len(ids), max(len(w) for w in weights), width), dtype=np.float32)
            for row, w in enumerate(weights):
                pool_w[row, : len(w), : w.shape[1]] = w
        vectors = self._forward(input_ids, mask, pool_w)
        if vectors.shape[-1] != self.spec.dim:
            raise ValueError(
                f"model {self.spec.name} produced {vectors.shape[-1]}-d vectors, "
                f"spec says {self.spec.dim}"
            )
        return l2_normalize(vectors) if self.spec.normalize else vectors

    def _forward(
        self, input_ids: np.ndarray, mask: np.ndarray, weights: np.ndarray | None = None
    ) -> np.ndarray:
        """Pooled (batch, dim) float32 vectors of one padded run (the backend's part);
        with ``weights`` (batch, views, tokens) the views' means (batch, views, dim)."""
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        (result,) = self._session.run([self._output_name], feeds)
        if self._pooled:
            return np.asarray(result, dtype=np.float32)
        if weights is not None:
            return pool_views(np.asarray(result), weights)
        return pool(np.asarray(result), mask, self.spec.pooling)

    def warmup(self) -> None:
        """Run a short and a full-length batch so the first request pays no allocation."""
        self.encode(["warm-up"] * 4)
        self.encode(["warm " * self.spec.max_tokens] * 2, is_query=True)
