"""The read path: embedding model, hot cache, retrieval, ranking and context blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from serve_app.settings.base import env, group


class EmbedSettings(BaseSettings):
    model_config = group("MEMSERVE_EMBED_")

    model: str = "all-minilm-l6-v2-int8"  # spec name or model directory (contract variable)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = None  # ONNX Runtime intra-op threads; default: the replica's CPUs
    max_batch_size: int = 32
    # Idle-encoder wait for a batch to fill; while a batch runs, callers queue anyway.
    batch_wait_s: float = 0.001
    # Padded tokens per ONNX Runtime run (texts sorted by length, split into runs of
    # at most this many); default: 512 on CPU (cache-sized runs), 16384 on CUDA.
    max_batch_tokens: int | None = None
    # ONNX Runtime idle threads busy-wait when True; off by default because replicas share
    # CPUs with other deployments (and Postgres), whose work spinning threads would steal.
    spinning: bool = False
    # onnx: ONNX Runtime (CPU, or CUDA with onnxruntime-gpu); torch: PyTorch from an fp16
    # copy of the checkpoint (GPU images with torch but no onnxruntime-gpu), same vectors.
    backend: Literal["onnx", "torch"] = "onnx"
    # Directory from `python -m models torch-export`; default <models cache>/<model>/torch-fp16.
    torch_weights: Path | None = None
    models_cache: Path | None = Field(None, validation_alias=env("MEMSERVE_MODELS_CACHE"))
    # The bulk lane (models/lanes.py): bulk lists (document chunks, re-embeds,
    # imports) run in slices of at most this many padded tokens and texts, each slice only
    # when no interactive caller waits, so a memory write waits for one slice at most.
    # Default tokens: the encoder's max_batch_tokens, i.e. one ONNX Runtime run per slice
    # (512 on CPU: two 256-token chunks; 16384 on CUDA).
    bulk_slice_tokens: int | None = Field(None, ge=1)
    bulk_slice_texts: int = Field(32, ge=1)
    # A bulk slice that has waited this long runs as soon as the encoder is free, even
    # with interactive callers waiting: bulk moves a slice per this under constant load.
    bulk_max_wait_s: float = Field(1.0, ge=0)


class CacheSettings(BaseSettings):
    """The retriever's FAISS/BM25 hot cache, per replica."""

    model_config = group("MEMSERVE_CACHE_")

    budget_mb: int = 512  # 0 disables the cache (pgvector only)
    hnsw_threshold: int = 20_000  # owners above this many vectors get FAISS HNSW, else flat
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    sync_load_max: int = 50_000  # colder/larger owners: answer from pgvector, load behind
    filter_max_ids: int = 5_000  # filtered search in the cache up to this many matches
    faiss_threads: int = 1  # OpenMP threads of FAISS (single queries gain nothing)


class RetrievalSettings(BaseSettings):
    """Candidate generation, fusion and routing (names as the historic variables)."""

    model_config = group("MEMSERVE_")

    hnsw_ef_search: int = 64  # pgvector
    retrieval_shards: int = 64  # shard key = crc32(user) % shards, the multiplexed model id
    retrieval_shards_per_replica: int = 64  # Serve multiplexing: shards a replica keeps warm
    pg_exact_scan_max: int = 5_000  # owners up to this size: exact scan via the owner btree
    # A global pgvector HNSW index on the vector tables (m, ef_construction below). Off:
    # every query is per owner, so the owner btree answers all of them exactly, and a
    # write skips HNSW insertion (loadtests/bench_insert.py at 100k rows: a
    # 100-row insert 12 ms vs 1.6 s, cold 10k-row owner p50 23 ms either way, recall@10
    # 1.0 vs 0.96). On for owners far above pg_exact_scan_max that are often cold.
    pg_hnsw: bool = False
    pg_hnsw_m: int = 16
    pg_hnsw_ef_construction: int = 64
    # Knowledge bases: a partial HNSW index (m, ef_construction above) over
    # the shared owners ('@org', '@agent:<id>') only, so personal writes never pay for
    # it; cold dense searches of a shared owner of at least pg_hnsw_shared_min vectors
    # read through it (iterative scan, hnsw_ef_search), smaller owners stay exact
    # (loadtests/bench_knowledge.py, docs/operations.md).
    pg_hnsw_shared: bool = True
    pg_hnsw_shared_min: int = 20_000
    # Its graph and scan width. A knowledge base is one owner of up to 10^6 chunks, where
    # m 16 / ef_construction 64 (the global index's) left recall@10 at 0.80 (ef_search
    # 100) to 0.94 (1000, pgvector's maximum); m 32 / ef_construction 128 reach 0.955 at
    # ef_search 400 and 0.985 at 1000 (bench_knowledge at 10^6, docs/operations.md).
    # Changing m or ef_construction applies to an index built after (the existing one
    # is kept, with a warning at start: rebuild it to apply them).
    pg_hnsw_shared_m: int = Field(32, ge=2, le=100)
    pg_hnsw_shared_ef_construction: int = Field(128, ge=4, le=1000)
    # 1000 (pgvector's most): two m 32 builds at 10^6 chunks gave recall@10 0.955 and
    # 0.89 at 400, 0.985 and 0.97 at 1000, for ~3 ms more at p50 (docs/operations.md).
    pg_hnsw_shared_ef_search: int = Field(1000, ge=1, le=1000)
    dense_depth: int = 100  # dense candidates fused per search (at least 3 x top_k)
    lexical_depth: int = 100  # lexical candidates fused per search
    # Hybrid fusion on cached owners (RRF always when cold).
    fusion: Literal["zscore", "rrf"] = "zscore"
    fusion_alpha: float = 0.7  # zscore: weight of z(cosine) vs z(BM25) (was 0.6)
    # zscore: share of the best adjacent memory's (creation order) fused score a memory
    # gets (chat turns: the answer sits next to the matching turn); 0: off. Scaled by the
    # owner's sequential coherence, full from fusion_neighbour_coherence (chats ~0.2,
    # unrelated documents ~0), see serve_app/retrieval/neighbours.py
    fusion_neighbour_weight: float = 0.4
    fusion_neighbour_coherence: float = 0.1
    fusion_full_max: int = 50_000  # zscore needs every score of the owner; bigger: RRF
    rrf_k: int = 10
    rrf_w_dense: float = 1.0
    rrf_w_lexical: float = 1.0
    bm25_k1: float = 1.2
    bm25_b: float = 0.3  # short memories: weak length normalisation (measured on LoCoMo)
    # Signals added to the z-score fusion on cached owners (serve_app/retrieval/signals.py;
    # LoCoMo dev per conversation in loadtests/results/eval_signals*.json):
    entity_weight: float = 0.0  # x idf of the query's proper nouns a memory names (dev: no gain)
    time_weight: float = 1.0  # x time fit ("when", a named period, "recently")
    # + this for a memory inside the period a question names ("last week", "in May 2023"),
    # read against the query's reference_date (today by default)
    period_weight: float = 1.0
    expand_seeds: int = 3  # the best hits whose rare entities and session lend a bonus
    expand_entity_weight: float = 0.0  # x idf of a seed's rare entities (dev: no gain)
    expand_session_weight: float = 0.6  # flat bonus for a seed's session
    session_cap: int = 0  # at most this many results per session before others (0: off)
    mmr_penalty: float = 0.0  # x max cosine to better hits (maximal marginal relevance)
    # Who embeds a search's query: the Retriever replica (one Serve hop per search)
    # or the Embedder (batched with others; GPU clusters). MEMSERVE_QUERY_EMBED.
    query_embed: Literal["retriever", "embedder"] = "retriever"
    # Most query texts one Retriever encoder run takes: queries arriving while a run computes
    # go together in the next (no fill wait). 1: one run per query. MEMSERVE_QUERY_BATCH_MAX.
    query_batch_max: int = Field(16, ge=1, le=256)


class RankSettings(BaseSettings):
    """Final score = w_similarity * cosine + w_importance * importance + w_recency * recency."""

    model_config = group("MEMSERVE_RANK_")

    w_similarity: float = 0.8
    w_importance: float = 0.1
    w_recency: float = 0.1
    recency_half_life_days: float = 30.0
    # What recency measures: "updated" (last write) or "accessed" (last time search or
    # context returned the memory, else its last write; see serve_app.services.access).
    recency_from: Literal["updated", "accessed"] = "updated"


# Generic life topics (serve_app/context/topics.py): what a message and a memory that
# share no words are both about ("my car" and "I drive a Tesla Model 3").
# loadtests/profile_admission.py, 2026-11-29 (docs/operations.md, "Context on a foreign set").
PROFILE_LEARNED = (
    0.0999,
    0.371,
    1.4418,
    1.8019,
    1.2154,
    1.6067,
    2.7945,
    1.5378,
    -0.9588,
    1.2806,
    -1.1158,
    0.9897,
    0.3353,
    -2.0093,
)

DEFAULT_TOPICS = (
    "the user's car or vehicle",
    "the user's pets and animals",
    "the user's children and parenting",
    "the user's health, medication and allergies",
    "the user's diet, food and cooking",
    "the user's home and where they live",
    "the user's job and work",
    "the user's hobbies and sports",
    "the user's travel and trips",
    "the user's money and finances",
    "the user's family, partner and friends",
    "the user's learning, studies and languages",
)


class ContextSettings(BaseSettings):
    model_config = group("MEMSERVE_CONTEXT_")

    token_budget: int = 1000  # default budget of a context block (approx. tokens)
    # memories considered for a context block: 20, not 10, carried 4.4 points more of
    # LoCoMo's evidence for +7% CPU per call (30: no more evidence, +43%; docs/operations.md)
    top_k: int = 20
    threshold: float = 0.2  # min cosine similarity of a memory in a context block
    max_facts: int = 50
    # Session-scope memories expire after this; 0: never.
    session_ttl_s: float = Field(86400.0, validation_alias=env("MEMSERVE_SESSION_TTL_S"))
    # The context levers, each on its own (all off: the block as before these levers).
    # The profile: instructions, constraints and identity, always in the block first,
    # at most ``profile_share`` of the token budget and ``profile_max_items`` memories.
    profile: bool = True
    profile_share: float = Field(0.25, gt=0, le=1)
    profile_max_items: int = Field(30, ge=1, le=200)
    # Which memories are profile material, decided as each is written
    # (serve_app/profile/classify.py): a logistic regression over ``PROFILE_FEATURES``
    # (one weight per feature, then the bias) fitted by loadtests/profile_admission.py on
    # the implicit-needs calibration users and the team's set; a memory joins at a
    # probability of ``profile_learned_min``. Empty: the hand-set cue and prototype
    # thresholds decide (they found 39% of the profile material of a foreign set).
    profile_learned: tuple[float, ...] = Field(PROFILE_LEARNED, max_length=32)
    # The highest bar at which the calibration half's blocks carry 0.80 of the needed
    # memories both when adds are typed and when they are not (mem0's API and most
    # clients send none): 0.29 (0.30 left untyped adds at 0.795; docs/operations.md).
    profile_learned_min: float = Field(0.29, ge=0, le=1)
    # POST /v1/admin/profile/classify: memories a call examines at most (it answers a
    # cursor for the next); bounds one call's reads and CPU.
    profile_classify_max: int = Field(2000, ge=1, le=100_000)
    # Messages read part by part (sentences, clauses, questions), each part searched
    # in one backend call (one encoder batch), results fused by their best part.
    split_parts: bool = True
    max_parts: int = Field(6, ge=1, le=20)
    # No noise: a retrieved memory (or a fact outside the profile) enters the block only
    # on evidence from this message: cosine >= ``evidence_similarity`` to a part, or a
    # shared content word and cosine >= ``evidence_similarity_lexical``. Calibrated on
    # loadtests/bench_context.py's calibration half (docs/operations.md).
    relevance_gate: bool = True
    # bench_context --variants nogate, calibration half (docs/operations.md, "Context
    # quality"): strong 0.35, weak 0.15, margin 0.1, two shared words.
    evidence_similarity: float = 0.35
    evidence_similarity_lexical: float = 0.15
    # The rule's other levers (serve_app/context/evidence.py), each on its own: an item
    # must lie within ``evidence_margin`` cosine of the message's best candidate (2: off);
    # below ``evidence_similarity`` it must share ``evidence_min_shared`` content words;
    # words that only say when ("weekend", "tonight") are not counted as shared.
    evidence_margin: float = Field(0.1, ge=0, le=2)
    evidence_min_shared: int = Field(2, ge=1, le=5)
    evidence_ignore_time_words: bool = False
    # The similarity path judges the lower of an item's cosine to the message and to the
    # message without its time words ("on Saturday", "this weekend": searched once more
    # without them, dense, in the same backend call), so when-words never add evidence.
    evidence_time_free: bool = True
    # Filling by rank (serve_app/context/evidence.py): after the rule, up to
    # ``evidence_fill`` more memories, best ranked first, with a cosine of at least
    # ``evidence_floor`` (0: off). Calibrated on the implicit-needs set's calibration
    # half (loadtests/context_levers.py; docs/operations.md, "Context on foreign sets").
    evidence_fill: int = Field(0, ge=0, le=50)
    evidence_floor: float = Field(0.25, ge=-1, le=1)
    # Learned admission (serve_app/context/evidence.py ``features``): one weight per
    # feature, then the bias, fitted by loadtests/context_admission.py on a calibration
    # half; a candidate the rule leaves out enters at a probability of
    # ``evidence_learned_min``. Empty: off.
    evidence_learned: tuple[float, ...] = Field((), max_length=16)
    evidence_learned_min: float = Field(0.5, ge=0, le=1)
    # Messages in a language the model does not read (MiniLM reads English): their
    # cosines are noise, so only ``foreign_similarity`` or more admits a memory by
    # similarity (shared words still count); the profile still applies. Detected by
    # py3langid (serve_app/language.py). On the implicit-needs calibration half
    # the retrieved section's unneeded share fell from 0.42 to 0.20 (docs/operations.md).
    foreign_guard: bool = True
    foreign_similarity: float = Field(0.6, ge=-1, le=1)
    # Life topics (serve_app/context/topics.py): a message clearly about one of
    # ``topics`` (cosine >= ``topic_min_cosine``, ``topic_margin`` nearer than the next)
    # has that description searched too; up to ``topic_max_items`` memories with a
    # cosine of ``topic_similarity`` or more to it enter on that evidence.
    topic_bridge: bool = False
    topics: tuple[str, ...] = Field(DEFAULT_TOPICS, min_length=2, max_length=64)
    topic_min_cosine: float = Field(0.25, ge=-1, le=1)
    topic_margin: float = Field(0.03, ge=0, le=2)
    topic_similarity: float = Field(0.4, ge=-1, le=1)
    topic_max_items: int = Field(2, ge=0, le=20)
    # Vectors pooled from the message's encoder run (models.views) instead of encoded on
    # their own: the time-free texts (the message without its time words), and the parts
    # that are stretches of the message. One run, several poolings: less CPU per call
    # (docs/operations.md, "Context CPU"); the vectors are close to, not equal to, the
    # texts encoded alone (their tokens were read in the whole message's context).
    pooled_time_free: bool = True
    pooled_parts: bool = True
    # Small talk ("hi", "thanks!"): "profile" (the profile only) or "nothing".
    small_talk: Literal["profile", "nothing"] = "profile"
    # Knowledge base: the readable documents' chunks (org, the agent's, the
    # user's own) in a "From the knowledge base" section, cited, through the same
    # evidence gate; the personal part first, the section at most ``knowledge_share``
    # of the budget unless the personal part leaves more (serve_app/context/knowledge.py).
    knowledge: bool = True
    knowledge_share: float = Field(0.3, gt=0, le=1)
    knowledge_top_k: int = Field(5, ge=1, le=50)  # chunks at most in one block
    knowledge_chunk_tokens: int = Field(120, ge=16, le=1000)  # a longer chunk is shortened


_CONTEXT_LEVERS_OFF = {"profile": False, "split_parts": False, "relevance_gate": False}
CONTEXT_PRESETS: dict[str, dict[str, Any]] = {
    "baseline": _CONTEXT_LEVERS_OFF,  # every lever off: the block as before these levers
    "profile": {**_CONTEXT_LEVERS_OFF, "profile": True},
    "split": {**_CONTEXT_LEVERS_OFF, "split_parts": True},
    "gate": {**_CONTEXT_LEVERS_OFF, "relevance_gate": True},
    "all": {},  # the defaults
    # the gate off, the rest on: what the gate is calibrated on (bench_context --calibrate)
    "nogate": {"relevance_gate": False},
    # the defaults but the gate's similarity path counts time words (before the time-free
    # lever): the same run's before/after for that lever
    "timewords": {"evidence_time_free": False},
    # the parts and time-free texts encoded on their own, not pooled from the message's run
    "encoded": {"pooled_time_free": False, "pooled_parts": False},
    # the defaults before the learned profile rule and 20 candidates per block
    "handset": {"profile_learned": (), "top_k": 10},
}
"""Named presets of the context levers: ``ContextSettings`` fields and their
values, every other field at its default (``Settings().with_(context=preset)``, or as
``MEMSERVE_CONTEXT_<FIELD>=true|false`` in a service's environment). The variants that
loadtests/bench_context.py and loadtests/profile_context.py compare; not read by the
service itself."""


def preset_env(preset: dict[str, Any]) -> dict[str, str]:
    """A preset as a service's environment: ``MEMSERVE_CONTEXT_<FIELD>`` = true/false, a
    number, or JSON for a list (how pydantic-settings reads each)."""
    return {
        f"MEMSERVE_CONTEXT_{k.upper()}": str(v).lower() if isinstance(v, bool) else json.dumps(v)
        for k, v in preset.items()
    }
