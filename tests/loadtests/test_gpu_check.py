"""loadtests/gpu_check.py: what it computes and how it refuses (the CPU dry run itself is
`make gpu-check`; the GPU run is the lead's, docs/operations.md GPU)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from loadtests import gpu_bundle, gpu_check


def test_exact_search_and_ranking_metrics() -> None:
    docs = np.eye(12, dtype=np.float32)
    queries = np.stack([np.arange(12, 0, -1, dtype=np.float32), docs[5]])
    top = gpu_check.search(queries, docs)
    assert top[0].tolist() == list(range(10)) and top[1][0] == 5
    ids = [f"d{i}" for i in range(12)]
    qrels = {"q1": {"d0": 1, "d11": 1}, "q2": {"d5": 2}}
    scores = gpu_check.ranking(top, ids, ["q1", "q2"], qrels)
    assert scores["recall@10"] == pytest.approx(0.75)  # q1 misses d11 (11th), q2 finds d5
    q1_ndcg = 1 / (1 + 1 / np.log2(3))  # d0 first; the ideal list has d11 second
    assert scores["ndcg@10"] == pytest.approx((q1_ndcg + 1) / 2, abs=1e-4)


def test_texts_are_distinct_and_about_the_asked_length() -> None:
    corpus = [{"text": " ".join(f"w{i}" for i in range(1000))}]
    texts = gpu_check.texts_of(corpus, 7, 64)
    assert len(set(texts)) == 64 and all(len(t.split()) == 7 for t in texts)


def test_a_bench_cell_reports_rate_and_percentiles() -> None:
    seen: list[int] = []
    row = gpu_check.bench_cell(lambda batch: seen.append(len(batch)), ["a", "b"], 8, 0.0, 5)
    # warm-up calls are full batches of the cell's own texts (their mix of lengths) too
    assert row["calls"] == 3 and set(seen) == {8} and len(seen) == 3 + 2
    assert row["texts_per_s"] > 0 and row["p95_ms"] >= row["p50_ms"]


def test_without_a_gpu_it_says_so_and_exits_3(tmp_path: Path, capsys) -> None:
    assert gpu_check.main(["--bundle", str(tmp_path / "absent")]) == 3
    assert "NO GPU" in capsys.readouterr().out


def test_a_bundle_whose_file_changed_is_refused(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "weights.bin").write_bytes(b"fp16")
    manifest = {"sha256": {"weights.bin": gpu_bundle.sha256(staging / "weights.bin")}}
    (staging / gpu_bundle.MANIFEST).write_text(json.dumps(manifest))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with tarfile.open(bundle / gpu_bundle.ARCHIVE, "w:xz") as tar:
        tar.add(staging / "weights.bin", arcname="weights.bin")
        tar.add(staging / gpu_bundle.MANIFEST, arcname=gpu_bundle.MANIFEST)
    assert gpu_bundle.unpack(bundle, tmp_path / "good") == tmp_path / "good"
    (tmp_path / "good" / "weights.bin").write_bytes(b"int8")
    with pytest.raises(SystemExit, match="differs"):
        gpu_bundle.verify(tmp_path / "good")
