"""Quality of the default model's int8 copy: batch independence, fidelity, dense LoCoMo recall.

For each ONNX file (default: the shipped graph and the re-quantised copy the
service runs), in one process on the CPU:

* batch independence: 300 LoCoMo turns and questions embedded one at a time
  vs in padded batches of 64 (max and mean ``1 - cosine``);
* fidelity: mean / min cosine of the one-at-a-time vectors to the shipped
  (fp32) graph's;
* dense retrieval on /work/shared/data/locomo-dev.json: each conversation's
  turns ("Speaker: text") ranked by cosine to each question, evidence
  recall@k and MRR, plus how much of the shipped graph's top 10 each keeps.
  R@10 moves by ~0.005 between copies of equal fidelity (and by 0.006 for one
  per-run-scale copy between batched and one-at-a-time vectors), so read it
  with the fidelity figures.

    .venv/bin/python -m loadtests.eval_requant               # ~2 minutes on 2 cores
    .venv/bin/python -m loadtests.eval_requant FILE.onnx ...  # other graphs of the model
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import numpy as np

import models  # noqa: F401  (import first: onnxruntime's tools shadow a bare "models")
from loadtests.eval_retrieval import DATA, evidence_ids, locomo_items, locomo_qa
from models import load_encoder, prepare_model
from models.encoder import Encoder
from models.resolve import resolve_onnx
from models.spec import ALL_MINILM_L6_V2_INT8, FileRef

SHIPPED = dataclasses.replace(ALL_MINILM_L6_V2_INT8, requantize=None)


def encoder(file: Path, threads: int = 1, **options: Any) -> Encoder:
    spec = dataclasses.replace(SHIPPED, onnx=(FileRef(str(file)),), onnx_gpu=())
    return load_encoder(spec, device="cpu", threads=threads, **options)


def sample_texts(conversations: list[dict], n: int = 300) -> list[str]:
    rng = random.Random(7)
    turns = [it["content"] for conv in conversations for it in locomo_items(conv)]
    questions = [q["question"] for conv in conversations for q in conv["qa"]]
    return rng.sample(turns, n * 4 // 5) + rng.sample(questions, n - n * 4 // 5)


def alone_and_batched(file: Path, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    enc = encoder(file, max_batch_tokens=1_000_000, max_batch_size=64)
    return np.concatenate([enc.encode([t]) for t in texts]), enc.encode(texts)


def locomo(file: Path, conversations: list[dict]) -> list[tuple[list[str], list[dict], Any]]:
    """Per conversation: turn ids, questions, question x turn cosine matrix."""
    enc = encoder(file, threads=2)
    out = []
    for conv in conversations:
        items = locomo_items(conv)
        qa = locomo_qa(conv, None)
        docs = enc.encode([it["content"] for it in items])
        queries = enc.encode([q["question"] for q in qa], is_query=True)
        out.append(([it["metadata"]["dia_id"] for it in items], qa, queries @ docs.T))
    return out


def recall(runs: list, reference: list) -> dict[str, float]:
    ks, hits, ranks, overlap = (1, 5, 10, 20), [], [], []
    for (ids, qa, sims), (_, _, ref) in zip(runs, reference, strict=True):
        for q, row, ref_row in zip(qa, sims, ref, strict=True):
            order, gold = np.argsort(-row), evidence_ids(q["evidence"])
            hits.append([len(gold & {ids[i] for i in order[:k]}) / len(gold) for k in ks])
            found = [r for r, i in enumerate(order) if ids[i] in gold]
            ranks.append(1 / (1 + found[0]) if found else 0.0)
            overlap.append(len(set(order[:10]) & set(np.argsort(-ref_row)[:10])) / 10)
    mean = np.mean(hits, axis=0)
    return {f"R@{k}": round(float(v), 4) for k, v in zip(ks, mean, strict=True)} | {
        "MRR": round(float(np.mean(ranks)), 4),
        "top10_kept": round(float(np.mean(overlap)), 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="ONNX graphs of the default model")
    args = parser.parse_args(argv)
    shipped = resolve_onnx(SHIPPED)
    files = args.files or [shipped, resolve_onnx(prepare_model(ALL_MINILM_L6_V2_INT8))]
    conversations = json.loads((DATA / "locomo-dev.json").read_text())
    texts = sample_texts(conversations)
    reference, _ = alone_and_batched(shipped, texts)
    ref_runs = locomo(shipped, conversations)
    for file in files:
        alone, batched = alone_and_batched(file, texts)
        gap = np.abs(1 - (alone * batched).sum(axis=1))
        fidelity = (alone * reference).sum(axis=1)
        row = {
            "file": file.name,
            "batch_gap_max": float(gap.max()),
            "batch_gap_mean": float(gap.mean()),
            "cos_to_shipped_mean": round(float(fidelity.mean()), 5),
            "cos_to_shipped_min": round(float(fidelity.min()), 5),
            "locomo_dense": recall(locomo(file, conversations), ref_runs),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
