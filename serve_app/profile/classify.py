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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from serve_app.profile.cues import CLASSES, CUES, FACT_KEYS, PROTOTYPES

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


def classify(
    text: str,
    mem_type: str,
    similarity: dict[str, float] | None,
    t: Thresholds = Thresholds(),
) -> str | None:
    """The profile class of a memory, or None. ``similarity``: class -> best cosine to its
    prototypes (None: no embedding; then cues decide alone)."""
    if mem_type in ("episodic", "document_chunk"):
        # events and plans are retrieved when relevant, not always shown; a document's
        # chunks are the tenant's knowledge, never a user's profile
        return None
    hits = cue_hits(text)
    best, best_score = None, 0.0
    for c in CLASSES:
        sim = similarity.get(c, 0.0) if similarity else (0.3 if hits[c] else 0.0)
        score = sim + t.cue_weight * min(hits[c], 2)
        if c == "instruction" and mem_type == "procedural":
            score += t.procedural_bonus
        need = t.with_cue if hits[c] else t.without_cue
        if score >= need and score > best_score:
            best, best_score = c, score
    return best


Embed = Callable[..., Awaitable[np.ndarray]]


class ProfileClassifier:
    """Classifies memories as they are written; prototypes embedded on first use.

    ``embed`` (the write path's document embedder; None: cues only) must be the one
    the memories' vectors come from, so prototype and memory share a space.
    """

    def __init__(self, embed: Embed | None = None, thresholds: Thresholds | None = None) -> None:
        self.embed = embed
        self.t = thresholds or Thresholds()
        self._protos: dict[str, np.ndarray] | None = None
        self._lock = asyncio.Lock()

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
        """One class (or None) per memory; ``vectors``: their document embeddings."""
        protos = await self.prototypes()
        out: list[str | None] = []
        for i, (text, mem_type) in enumerate(zip(texts, types, strict=True)):
            if mem_type == "document_chunk":  # knowledge, not a memory: no profile class
                out.append(None)
                continue
            sims = None
            if protos is not None:
                v = np.asarray(vectors[i], dtype=np.float32)
                sims = {c: float(np.max(p @ v)) for c, p in protos.items()}
            out.append(classify(text, mem_type, sims, self.t))
        return out


def fact_class(category: str, key: str) -> str | None:
    """A fact's profile class: its category when that is a class (extraction's facts),
    else what its key says ("personal.name" is identity), else None."""
    c = category.strip().lower()
    if c in CLASSES:
        return c
    return FACT_KEYS.get(key.strip().lower())
