"""Several encoders behind one replica: the configured model plus any a caller names.

During a model change the Embedder serves two specs at once: the old (still active)
model embeds queries and dedup lookups, the new one re-embeds the memories into its
table (serve_app/reembed). Callers name the model by the reference that loads it (a
spec name or a model directory); ``None`` is the replica's configured model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from models.encoder import Encoder

Loader = Callable[[str], Encoder]


class EncoderSet:
    def __init__(self, default: Encoder, loader: Loader, default_ref: str | None = None) -> None:
        self.default = default
        self._loader = loader
        self._encoders: dict[str, Encoder] = {default.spec.name: default}
        if default_ref:
            self._encoders[default_ref] = default
        self._lock = threading.Lock()

    def __contains__(self, ref: str | None) -> bool:
        return ref is None or ref in self._encoders

    def get(self, ref: str | None) -> Encoder:
        """The encoder of ``ref``, loaded on first use (once, whatever the thread)."""
        if ref is None:
            return self.default
        found = self._encoders.get(ref)
        if found is None:
            with self._lock:
                found = self._encoders.get(ref)
                if found is None:
                    found = self._loader(ref)
                    self._encoders[ref] = self._encoders.setdefault(found.spec.name, found)
                    found = self._encoders[ref]
        return found

    def loaded(self) -> list[Encoder]:
        """Each loaded encoder once."""
        return list({id(e): e for e in self._encoders.values()}.values())

    def encode_mixed(
        self, texts: Sequence[str], is_query: Sequence[bool], refs: Sequence[str | None]
    ) -> np.ndarray | list[np.ndarray]:
        """Each text with its own model, in input order.

        One model: its encoder's (n, dim) array. Several: the texts are grouped per
        model (one encoder run each) and the rows come back as a list, since the
        models' dimensions may differ.
        """
        if len(set(refs)) <= 1:
            return self.get(refs[0] if refs else None).encode_mixed(texts, is_query)
        groups: dict[str | None, list[int]] = {}
        for i, ref in enumerate(refs):
            groups.setdefault(ref, []).append(i)
        rows: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(texts)
        for ref, idx in groups.items():
            vectors = self.get(ref).encode_mixed(
                [texts[i] for i in idx], [is_query[i] for i in idx]
            )
            for i, v in zip(idx, vectors, strict=True):
                rows[i] = v
        return rows
