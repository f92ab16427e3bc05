"""Agreement of two ONNX graphs of one model: cosines of their vectors on a fixed set.

A quantised graph is only used while its vectors stay close to the
reference's: the export CLI checks int8 against fp32, and
:mod:`models.requantize` checks the per-channel copy of a shipped model
against the shipped graph, both on these texts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from models.encoder import Encoder
from models.session import open_encoder
from models.spec import FileRef, ModelSpec

#: Fixed passages: chat-like memories, short and long texts, punctuation,
#: digits, non-ASCII.
CHECK_SENTENCES: tuple[str, ...] = (
    "I'm allergic to peanuts and shellfish.",
    "My daughter Emma starts kindergarten in September.",
    "Prefers window seats on long-haul flights.",
    "The user works as a backend engineer at a fintech startup in Berlin.",
    "We agreed to deploy the new release on Thursday after the load test.",
    "Remind me to call the dentist next week.",
    "What did I tell you about my diet?",
    "Which programming languages do I use at work?",
    "Order #48213 was shipped on 2024-03-18 via DHL.",
    "She loves hiking in the Alps and skiing in winter.",
    "Convert the meeting notes into a bullet list.",
    "The café on the corner serves the best crème brûlée.",
    "How do I configure HNSW ef_search in pgvector?",
    "ok",
    "Thanks!",
    "Budget for the trip is around 3000 euros, flights not included.",
    (
        "Over the last three sessions the user described a migration of their "
        "monolith to services: they split billing first, then moved the search "
        "index to a separate cluster, and now plan to replace the message queue. "
        "They are worried about data consistency during the cut-over and want a "
        "rollback plan that can be executed by the on-call engineer alone."
    ),
    "Python 3.11, Ray Serve and PostgreSQL with the pgvector extension.",
    "He doesn't like spicy food, but he is fine with garlic.",
    "Meeting moved from 10:00 to 14:30 because of the all-hands.",
)

#: Fixed search queries (embedded with the spec's query prefix).
CHECK_QUERIES: tuple[str, ...] = (
    "What food allergies do I have?",
    "When does my daughter start school?",
    "Where do I like to sit on a plane?",
    "What is my job?",
    "When is the release?",
    "Which package was shipped by DHL?",
    "What do I do in winter?",
    "How much can I spend on the trip?",
    "what tools does the user's stack use",
    "meeting time",
)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two equally shaped matrices."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.clip(norms, 1e-12, None)


def check_vectors(encoder: Encoder) -> np.ndarray:
    """The encoder's vectors of the fixed passages, then of the fixed queries."""
    docs = encoder.encode(CHECK_SENTENCES)
    queries = encoder.encode(CHECK_QUERIES, is_query=True)
    return np.concatenate([docs, queries])


def file_encoder(spec: ModelSpec, file: str | Path) -> Encoder:
    """A one-thread CPU encoder of ``spec`` that runs exactly ``file``.

    ``file`` is relative to the spec's directory or absolute; the copy of the
    spec asks for no re-quantisation and :func:`models.session.open_encoder` does
    none, so the file runs as it is (and this module needs no re-quantiser).
    """
    variant = dataclasses.replace(spec, onnx=(FileRef(str(file)),), onnx_gpu=(), requantize=None)
    return open_encoder(variant, device="cpu", threads=1)


def compare(spec: ModelSpec, file_a: str | Path, file_b: str | Path) -> tuple[float, float]:
    """Mean and min cosine between two ONNX files of one spec on the fixed set."""
    a = check_vectors(file_encoder(spec, file_a))
    b = check_vectors(file_encoder(spec, file_b))
    cos = cosines(a, b)
    return float(cos.mean()), float(cos.min())


def batch_consistency(spec: ModelSpec, file: str | Path) -> tuple[float, float]:
    """Mean and min cosine between each text embedded alone and inside a batch.

    Dynamic int8 with one activation scale per run makes a text's vector
    depend slightly on its batch mates (~.996); fp32 graphs and copies with
    per-token or fixed scales (:mod:`models.rowscales`) give 1.0 here.
    """
    encoder = file_encoder(spec, file)
    batched = encoder.encode(CHECK_SENTENCES)
    alone = np.concatenate([encoder.encode([text]) for text in CHECK_SENTENCES])
    cos = cosines(batched, alone)
    return float(cos.mean()), float(cos.min())
