"""Re-scoring of search and context candidates: the ``rerank`` request option.

Off unless a request asks for it and the operator offers a back-end
(``MEMSERVE_RERANK_BACKENDS``, narrowed per tenant). Two back-ends score (message,
candidate) pairs:

- ``onnx``: an operator-supplied cross-encoder (``model.onnx`` + ``tokenizer.json``),
  run on a worker thread (a CPU-bound model must not hold the event loop), batched;
- ``llm``: the tenant's extraction LLM asked for one score per candidate, metered
  (purpose ``rerank``); over budget, down or answering nonsense, the candidates keep
  the order they had and the outcome says why (a 5xx would cost the caller its search
  for an optional refinement).

Only the first ``max_candidates`` are re-scored (each costs a model run or prompt
tokens); the rest follow in their order. Plain Python: the services call it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from serve_app.llm.answer_schema import ResponseSchema
from serve_app.llm.client import LLMClient, LLMUnavailable
from serve_app.metrics import Flusher, RerankMetrics
from serve_app.settings import RerankSettings
from serve_app.store.llm_spend import CallTag, OverBudget

log = logging.getLogger(__name__)
RERANK_MARKER = "You re-rank a user's memories"  # the LLM prompt's first words (fakes match it)
SYSTEM = (
    f"{RERANK_MARKER} for one message they are writing to an assistant. For each numbered"
    " memory, judge how much knowing it helps the assistant answer or personalise its reply"
    " to this message (0: not at all, 10: essential). Answer only JSON:"
    ' {"scores": [<one number per memory, in the given order>]}.'
)


class RerankUnavailable(ValueError):
    """A request asked for a back-end that is not offered to its tenant."""


class Scorer(Protocol):
    """Scores of (query, text) pairs, higher is more relevant, one per text."""

    async def scores(self, query: str, texts: Sequence[str], tag: CallTag) -> list[float]: ...


class Fallback(Exception):
    """The scorer could not score (the order stays); ``reason`` goes in the outcome."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CrossEncoder:
    """An ONNX cross-encoder: a sequence-classification model over (query, text) pairs.

    Its first output is the logits: one column (the relevance logit) or two (not
    relevant, relevant: their difference ranks the same as the softmax). The model's
    inputs are fed by name from the tokenizer's encoding (``input_ids``,
    ``attention_mask``, ``token_type_ids`` where the model takes them).
    """

    def __init__(
        self, directory: Path, *, max_length: int = 256, batch_size: int = 16, threads: int = 1
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model, vocab = directory / "model.onnx", directory / "tokenizer.json"
        for path in (model, vocab):
            if not path.is_file():
                raise FileNotFoundError(f"rerank cross-encoder: {path} is missing")
        self.tokenizer = Tokenizer.from_file(str(vocab))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.batch_size = max(1, batch_size)

    def score_sync(self, query: str, texts: Sequence[str]) -> list[float]:
        """Relevance logits of (query, text) pairs, ``batch_size`` pairs per model run."""
        out: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            pairs = [(query, t) for t in texts[start : start + self.batch_size]]
            encoded = self.tokenizer.encode_batch(pairs)
            feeds = {
                "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
            }
            logits = self.session.run(None, {k: feeds[k] for k in self.inputs})[0]
            logits = np.asarray(logits, dtype=np.float64).reshape(len(pairs), -1)
            col = logits[:, 0] if logits.shape[1] == 1 else logits[:, -1] - logits[:, 0]
            out.extend(float(x) for x in col)
        return out

    async def scores(self, query: str, texts: Sequence[str], tag: CallTag) -> list[float]:
        return await asyncio.to_thread(self.score_sync, query, list(texts))


class LLMScorer:
    """The tenant's LLM asked for a 0-10 score per candidate, in one metered call."""

    def __init__(self, llm: LLMClient, *, max_chars: int = 500, max_tokens: int = 256) -> None:
        self.llm = llm
        self.max_chars = max_chars
        self.max_tokens = max_tokens

    def prompt(self, query: str, texts: Sequence[str]) -> str:
        def cut(s: str) -> str:
            return " ".join(s[: self.max_chars].split())

        listed = "\n".join(f"[{i}] {cut(t)}" for i, t in enumerate(texts))
        return f"Message: {cut(query)}\n\nMemories:\n{listed}"

    async def scores(self, query: str, texts: Sequence[str], tag: CallTag) -> list[float]:
        try:
            content = await self.llm.complete_json(
                SYSTEM,
                self.prompt(query, texts),
                tag=tag,
                max_tokens=self.max_tokens,
                schema=scores_schema(len(texts)),
            )
        except OverBudget:
            raise Fallback("over_budget") from None
        except LLMUnavailable:
            raise Fallback("llm_unavailable") from None
        return parse_scores(content, len(texts))

    async def close(self) -> None:
        await self.llm.close()


def scores_schema(n: int) -> ResponseSchema:
    """The answer's strict form: exactly ``n`` whole-number scores. In ``json_object`` mode
    a small local model (Qwen2.5-Coder-1.5B here) kept writing past the list until the
    token cap cut it, twice per call (256, then 512 tokens: 100 s, and no usable
    scores); a constrained decoder given the list's length cannot. The length is the
    one bound kept in the schema (serve_app/llm/answer_schema.py leaves bounds to the
    validator) because it is what ends the answer; ``parse_scores`` still checks it."""
    scores = {"type": "array", "items": {"type": "integer"}, "minItems": n, "maxItems": n}
    schema = {
        "type": "object",
        "properties": {"scores": scores},
        "required": ["scores"],
        "additionalProperties": False,
    }
    return ResponseSchema("rerank_scores", schema)


def parse_scores(content: str, n: int) -> list[float]:
    """``{"scores": [...]}`` with ``n`` finite numbers, else :class:`Fallback`."""
    try:
        scores = json.loads(content)["scores"]
    except (ValueError, KeyError, TypeError):
        raise Fallback("llm_malformed") from None
    if not isinstance(scores, list) or len(scores) != n:
        raise Fallback("llm_malformed")
    out = []
    for s in scores:
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s):
            raise Fallback("llm_malformed")
        out.append(float(s))
    return out


@dataclass(frozen=True)
class RerankOutcome:
    """What a request's ``rerank`` did (the response's ``rerank`` object)."""

    backend: str | None
    applied: bool
    reason: str | None = None  # why not: not_configured, over_budget, llm_unavailable, ...
    candidates: int = 0  # re-scored

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "applied": self.applied,
            "reason": self.reason,
            "candidates": self.candidates,
        }


class Reranker:
    """The back-ends this replica built, and the one step every caller runs."""

    def __init__(
        self,
        settings: RerankSettings,
        scorers: dict[str, Scorer],
        metrics: RerankMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.scorers = {b: scorers[b] for b in settings.backends if b in scorers}
        self.metrics = metrics or RerankMetrics()
        self.flusher = Flusher([self.metrics])  # started by the first call on a loop

    @property
    def pool(self) -> int:
        """Candidates a reranked search should fetch (all of them may be re-scored)."""
        return max(1, self.settings.max_candidates)

    @property
    def context_pool(self) -> int:
        """Candidates a reranked context block fetches and re-scores."""
        return max(1, self.settings.context_candidates or self.settings.max_candidates)

    def min_score(self, backend: str) -> float | None:
        """The score at which ``backend``'s judgement admits a context candidate (its
        scale is the back-end's: a cross-encoder's logit, the LLM's 0-10); None: none."""
        s = self.settings
        return s.onnx_min_score if backend == "onnx" else s.llm_min_score

    def offered(self, allowed: Collection[str] | None = None) -> tuple[str, ...]:
        """The back-ends offered to a tenant (``allowed``: its own list; None: all)."""
        return tuple(b for b in self.scorers if allowed is None or b in allowed)

    def choose(self, requested: bool | str, allowed: Collection[str] | None = None) -> str | None:
        """The back-end a request's ``rerank`` names (``True``: the default one); None
        for ``False``. Raises :class:`RerankUnavailable` when it is not offered."""
        if requested is False:
            return None
        offered = self.offered(allowed)
        if not offered:
            raise RerankUnavailable("rerank: no back-end is enabled for this tenant")
        if requested is True:
            default = self.settings.default_backend
            return default if default in offered else offered[0]
        if requested not in offered:
            raise RerankUnavailable(
                f"rerank: back-end {requested!r} is not enabled (offered: {', '.join(offered)})"
            )
        return str(requested)

    async def rerank(
        self,
        rows: list[dict[str, Any]],
        query: str,
        backend: str,
        tag: CallTag,
        pool: int | None = None,
    ) -> tuple[list[dict[str, Any]], RerankOutcome]:
        """``rows`` with the first ``pool`` (default ``max_candidates``) ordered by the
        back-end's score (each gets ``rerank_score``), the rest after them in their order.
        On a fallback the rows come back as they were."""
        n = pool or self.pool
        head, tail = rows[:n], rows[n:]
        if not head:
            return rows, RerankOutcome(backend, False, "no_candidates")
        started = time.perf_counter()
        self.flusher.start()
        try:
            scores = await self.scorers[backend].scores(query, [r["content"] for r in head], tag)
        except Fallback as exc:
            self.metrics.call(backend, exc.reason, time.perf_counter() - started)
            log.info("rerank (%s) fell back to the search order: %s", backend, exc.reason)
            return rows, RerankOutcome(backend, False, exc.reason, len(head))
        self.metrics.call(backend, "ok", time.perf_counter() - started)
        for r, s in zip(head, scores, strict=True):
            r["rerank_score"] = s
        ranked = sorted(range(len(head)), key=lambda i: (-scores[i], i))  # ties: search order
        return [head[i] for i in ranked] + tail, RerankOutcome(backend, True, None, len(head))

    async def close(self) -> None:
        for scorer in self.scorers.values():
            if isinstance(scorer, LLMScorer):
                await scorer.close()
        await self.flusher.stop()


def build_reranker(
    settings: RerankSettings, llm: LLMClient | None, metrics: RerankMetrics | None = None
) -> Reranker:
    """The back-ends the settings offer (``llm``: the client, None when no LLM is set)."""
    scorers: dict[str, Scorer] = {}
    if "onnx" in settings.backends:
        if settings.onnx_dir is None:
            raise ValueError("MEMSERVE_RERANK_BACKENDS names onnx: set MEMSERVE_RERANK_ONNX_DIR")
        scorers["onnx"] = CrossEncoder(
            settings.onnx_dir,
            max_length=settings.max_length,
            batch_size=settings.batch_size,
            threads=settings.threads,
        )
    if "llm" in settings.backends:
        if llm is None:
            raise ValueError("MEMSERVE_RERANK_BACKENDS names llm: set MEMSERVE_LLM_BASE_URL")
        scorers["llm"] = LLMScorer(
            llm, max_chars=settings.max_chars, max_tokens=settings.llm_max_tokens
        )
    return Reranker(settings, scorers, metrics)
