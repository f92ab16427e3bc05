"""Life topics: a bridge between a message and a memory that share no words.

"How do I charge my car on a long road trip?" needs "I drive a Tesla Model 3", but the
two share no word and their cosine is 0.1-0.35, under any gate that keeps noise out. Both
are nearest to the same short topic description ("the user's car or vehicle"), while
unrelated memories are nearest to others. So the message's topic is found by its cosine
to each description (it must be near one, and clearly nearer than to the next), and the
description is searched like a message: memories close to it are about that topic and
may enter the block on that evidence (serve_app/context/builder.py).

The descriptions are vectors of the running model, embedded once per builder (a model
switch builds new services). The default list is generic; a deployment may give its own
(``MEMSERVE_CONTEXT_TOPICS``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from serve_app.settings.retrieval import DEFAULT_TOPICS

# (texts, is_query) -> L2-normalised vectors (the Embedder's, or the encoder's in tests)
EmbedFn = Callable[..., Awaitable[np.ndarray]]


@dataclass(frozen=True)
class Topic:
    text: str  # the description, searched like a message
    cosine: float  # the message's cosine to it
    margin: float  # how much nearer than the next description


class Topics:
    def __init__(self, embed: EmbedFn, descriptions: Sequence[str] = DEFAULT_TOPICS) -> None:
        self.embed = embed
        self.descriptions = tuple(descriptions)
        self._vectors: np.ndarray | None = None
        self._lock = asyncio.Lock()

    async def vectors(self) -> np.ndarray:
        """The descriptions' vectors (as documents: memories are matched to them)."""
        if self._vectors is None:
            async with self._lock:
                if self._vectors is None:
                    out = await self.embed(list(self.descriptions), is_query=False)
                    self._vectors = np.asarray(out, dtype=np.float32)
        return self._vectors

    async def of(self, text: str, min_cosine: float, min_margin: float) -> Topic | None:
        """The topic ``text`` is about: its nearest description, when the cosine is at
        least ``min_cosine`` and beats the runner-up by ``min_margin``; else None."""
        if len(self.descriptions) < 2 or not text.strip():
            return None
        protos = await self.vectors()
        q = np.asarray(await self.embed([text], is_query=True), dtype=np.float32)[0]
        sims = protos @ q
        order = np.argsort(-sims)
        best, runner = float(sims[order[0]]), float(sims[order[1]])
        if best < min_cosine or best - runner < min_margin:
            return None
        return Topic(self.descriptions[int(order[0])], best, best - runner)
