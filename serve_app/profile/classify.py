"""Which memories belong in the user's profile, decided once when a memory is written.

A context block always carries the profile: standing instructions ("always
answer in short bullet points"), constraints (allergies, diets, health, accessibility,
budget) and identity (name, location, family, work). A message about dinner does not
mention the peanut allergy, so search alone misses it; classifying at write time costs
nothing per request.

Without an LLM the class comes from two signals (the LLM sets it itself in extraction):

- lexical cues: words and short phrases typical of each class, found by a plain scan
  of the lower-cased words (linear, no regular expressions on user text);
- the embedding the write computed anyway, against prototype descriptions of each class
  (embedded once per process by :class:`ProfileClassifier`).

A memory joins the class with the best combined score if that clears a threshold
(calibrated on loadtests/data/context_bench.json, see docs/operations.md).

Those hand-set thresholds fit the set they were set on: on memories written by someone
else (the implicit-needs set) they found 39% of the profile material. A learned rule
(:class:`LearnedProfile`) weighs the same signals, plus the memory's type, its length
and whether the model reads its language, with a logistic regression fitted by
loadtests/profile_admission.py; it decides *whether* a memory is profile material, and
the combined score above names the class. A memory in a language the model does not read
cannot be found by similarity at all, so when it reads like profile material the profile
is the one place it can surface.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from serve_app.language import model_reads
from serve_app.profile.cues import CLASSES, CUES, FACT_KEYS, PROTOTYPES
from serve_app.ranking import logistic
from serve_app.settings import ContextSettings

log = logging.getLogger(__name__)

# Display order and priority under the token cap: what the assistant must obey first.
PRIORITY = {c: i for i, c in enumerate(CLASSES)}


# ASCII text: every character that is not a letter, a digit, an apostrophe or a hyphen
# becomes a space, so str.split finds the words at C speed (the same words as the scan).
_ASCII_BREAKS = str.maketrans(
    {chr(c): " " for c in range(128) if not (chr(c).isalnum() or chr(c) in "'-")}
)


def words(text: str) -> list[str]:
    """Lower-cased words (letters, digits, apostrophes, hyphens) by a plain scan."""
    text = text.lower().replace("\u2019", "'")
    if text.isascii():  # the common case, per candidate of every context call
        return [w for w in (t.strip("'-") for t in text.translate(_ASCII_BREAKS).split()) if w]
    return scan_words(text)


def scan_words(text: str) -> list[str]:
    """:func:`words` of an already lower-cased text, character by character."""
    out: list[str] = []
    buf: list[str] = []
    for ch in text:
        if ch.isalnum() or ch in "'-":
            buf.append(ch)
        elif buf:
            out.append("".join(buf).strip("'-"))
            buf = []
    if buf:
        out.append("".join(buf).strip("'-"))
    return [w for w in out if w]


def _phrases(ws: Sequence[str], longest: int = 3) -> set[str]:
    """Every run of 1..``longest`` consecutive words, space-joined (linear in words)."""
    out: set[str] = set()
    for n in range(1, longest + 1):
        for i in range(len(ws) - n + 1):
            out.add(" ".join(ws[i : i + n]))
    return out


_CUE_SETS = {c: frozenset(p) for c, p in CUES.items()}


def cue_hits(text: str) -> dict[str, int]:
    """Class -> how many of its cue phrases ``text`` contains."""
    grams = _phrases(words(text))
    return {c: len(grams & cues) for c, cues in _CUE_SETS.items()}


@dataclass(frozen=True)
class Thresholds:
    """Calibrated on the context benchmark's calibration half (docs/operations.md)."""

    cue_weight: float = 0.25  # added per cue hit (at most two count)
    with_cue: float = 0.45  # min combined score of a class with a cue hit
    without_cue: float = 0.62  # min prototype similarity alone (no cue)
    procedural_bonus: float = 0.1  # typed procedural: a standing instruction is likelier


def _scores(
    hits: dict[str, int], mem_type: str, similarity: dict[str, float] | None, t: Thresholds
) -> dict[str, float]:
    """Class -> combined score: prototype similarity plus the cue hits (at most two)."""
    out = {}
    for c in CLASSES:
        sim = similarity.get(c, 0.0) if similarity else (0.3 if hits[c] else 0.0)
        out[c] = sim + t.cue_weight * min(hits[c], 2)
        if c == "instruction" and mem_type == "procedural":
            out[c] += t.procedural_bonus
    return out


def classify(
    text: str,
    mem_type: str,
    similarity: dict[str, float] | None,
    t: Thresholds = Thresholds(),
    learned: LearnedProfile | None = None,
) -> str | None:
    """The profile class of a memory, or None. ``similarity``: class -> best cosine to its
    prototypes (None: no embedding; then cues decide alone). ``learned``: whether it is
    profile material is the learned rule's call (it needs the similarities)."""
    if mem_type == "document_chunk":  # the tenant's knowledge, never a user's profile
        return None
    hits = cue_hits(text)
    scores = _scores(hits, mem_type, similarity, t)
    if learned is not None and similarity is not None:
        if learned.probability(profile_features(text, mem_type, similarity, hits)) < learned.min:
            return None
        return max(CLASSES, key=lambda c: scores[c])
    if mem_type == "episodic":  # events and plans are retrieved when relevant
        return None
    best, best_score = None, 0.0
    for c in CLASSES:
        need = t.with_cue if hits[c] else t.without_cue
        if scores[c] >= need and scores[c] > best_score:
            best, best_score = c, scores[c]
    return best


# What the learned rule sees of a memory, in the order of its weights.
PROFILE_FEATURES = (
    *(f"similarity:{c}" for c in CLASSES),
    *(f"cues:{c}" for c in CLASSES),  # hits, at most two count
    "similarity:best",
    "type:fact",
    "type:preference",
    "type:procedural",
    "type:episodic",  # none of the four: the platform sent no type
    "unread_language",  # the model does not read the memory's language
    "length",  # words / 40, at most 1
)
TYPED = ("fact", "preference", "procedural", "episodic")


def profile_features(
    text: str, mem_type: str, similarity: dict[str, float], hits: dict[str, int] | None = None
) -> list[float]:
    """:data:`PROFILE_FEATURES` of one memory (linear in its text)."""
    hits = cue_hits(text) if hits is None else hits
    out = [similarity.get(c, 0.0) for c in CLASSES]
    out += [float(min(hits[c], 2)) for c in CLASSES]
    out.append(max((similarity.get(c, 0.0) for c in CLASSES), default=0.0))
    out += [float(mem_type == t) for t in TYPED]
    out.append(float(not model_reads(text)))
    out.append(min(len(text.split()), 40) / 40)
    return out


@dataclass(frozen=True)
class LearnedProfile:
    """A logistic regression over :data:`PROFILE_FEATURES`: ``weights`` (one per
    feature, then the bias) and the probability ``min`` at which a memory is profile
    material."""

    weights: tuple[float, ...]
    min: float = 0.5

    def __post_init__(self) -> None:
        if len(self.weights) != len(PROFILE_FEATURES) + 1:
            raise ValueError(
                f"profile weights: {len(PROFILE_FEATURES) + 1} numbers (one per feature of "
                f"{', '.join(PROFILE_FEATURES)}, then the bias), not {len(self.weights)}"
            )

    def probability(self, features: Sequence[float]) -> float:
        return logistic(self.weights, features)

    @classmethod
    def of(cls, weights: Sequence[float], min_probability: float) -> LearnedProfile | None:
        """The rule from settings (no weights: None, the hand-set thresholds decide)."""
        return cls(tuple(weights), min_probability) if weights else None


Embed = Callable[..., Awaitable[np.ndarray]]


# Memories classified on the event loop at most (tens of µs each: cue scan, language);
# a larger batch goes to a thread.
INLINE_MAX = 16


class ProfileClassifier:
    """Classifies memories as they are written; prototypes embedded on first use.

    ``embed`` (the write path's document embedder; None: cues only) must be the one
    the memories' vectors come from, so prototype and memory share a space.
    """

    def __init__(
        self,
        embed: Embed | None = None,
        thresholds: Thresholds | None = None,
        learned: LearnedProfile | None = None,
    ) -> None:
        self.embed = embed
        self.t = thresholds or Thresholds()
        self.learned = learned  # used where the memories' vectors are at hand
        self._protos: dict[str, np.ndarray] | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, embed: Embed | None, s: ContextSettings) -> ProfileClassifier:
        """The write path's classifier: the learned rule where the settings give one."""
        return cls(embed, learned=LearnedProfile.of(s.profile_learned, s.profile_learned_min))

    async def prototypes(self) -> dict[str, np.ndarray] | None:
        if self._protos is not None or self.embed is None:
            return self._protos
        async with self._lock:
            if self._protos is None:
                try:
                    self._protos = await self._embed_prototypes()
                except Exception:  # cues only this time; the next write tries again
                    log.warning("embedding the profile prototypes failed", exc_info=True)
        return self._protos

    async def _embed_prototypes(self) -> dict[str, np.ndarray]:
        assert self.embed is not None
        texts = [p for c in CLASSES for p in PROTOTYPES[c]]
        vecs = np.asarray(await self.embed(texts, is_query=False), dtype=np.float32)
        out, i = {}, 0
        for c in CLASSES:
            n = len(PROTOTYPES[c])
            out[c] = vecs[i : i + n]
            i += n
        return out

    async def classify_many(
        self, texts: Sequence[str], types: Sequence[str], vectors: np.ndarray | Sequence
    ) -> list[str | None]:
        """One class (or None) per memory; ``vectors``: their document embeddings.
        A batch of more than ``INLINE_MAX`` (an import, a re-classification's page) is
        classified on a worker thread: cue scans and language detection are CPU work."""
        protos = await self.prototypes()
        if len(texts) > INLINE_MAX:
            return await asyncio.to_thread(self._classify_all, texts, types, vectors, protos)
        return self._classify_all(texts, types, vectors, protos)

    def _classify_all(
        self,
        texts: Sequence[str],
        types: Sequence[str],
        vectors: np.ndarray | Sequence,
        protos: dict[str, np.ndarray] | None,
    ) -> list[str | None]:
        out: list[str | None] = []
        for i, (text, mem_type) in enumerate(zip(texts, types, strict=True)):
            if mem_type == "document_chunk":  # knowledge, not a memory: no profile class
                out.append(None)
                continue
            sims = None
            if protos is not None:
                v = np.asarray(vectors[i], dtype=np.float32)
                sims = {c: float(np.max(p @ v)) for c, p in protos.items()}
            out.append(classify(text, mem_type, sims, self.t, self.learned))
        return out


def fact_class(category: str, key: str) -> str | None:
    """A fact's profile class: its category when that is a class (extraction's facts),
    else what its key says ("personal.name" is identity), else None."""
    c = category.strip().lower()
    if c in CLASSES:
        return c
    return FACT_KEYS.get(key.strip().lower())
