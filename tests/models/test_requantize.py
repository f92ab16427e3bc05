"""First-start re-quantisation of the default model: build, verify, reuse, rebuild, refuse."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models import ModelSpecError, RequantizeError, get_spec, load_encoder, prepare_model
from models import requantize as rq
from models.agreement import batch_consistency, compare
from models.resolve import resolve_onnx, sha256_file
from models.spec import ALL_MINILM_L6_V2_INT8, MINILM_INT8_SHA256, REQUANTIZE_MODES, ModelSpec
from tests.models.conftest import REPO, SHIPPED_MINILM

NAME = "all-minilm-l6-v2-int8"
MODE = "per_channel_smooth"
STEM = f"model.{MODE}-{rq.RECIPES[MODE].digest()}"


def _files(cache: Path) -> tuple[Path, Path]:
    return cache / NAME / f"{STEM}.onnx", cache / NAME / f"{STEM}.json"


def test_builds_a_verified_int8_copy(requantized_cache: Path) -> None:
    copy, manifest_path = _files(requantized_cache)
    spec = prepare_model(NAME, requantized_cache)
    assert (spec.name, spec.table_slug, spec.requantize) == (NAME, "all_minilm_l6_v2_int8", None)
    assert resolve_onnx(spec) == copy
    manifest = json.loads(manifest_path.read_text())
    assert manifest["source_sha256"] == MINILM_INT8_SHA256
    assert manifest["sha256"] == sha256_file(copy) == spec.onnx[0].sha256
    assert manifest["onnxruntime"] == ort.__version__
    assert manifest["mean_cosine"] >= 0.99
    assert manifest["mode"] == MODE and manifest["recipe"] == rq.RECIPES[MODE].to_json()
    # Measured again here, not taken from the manifest; the smoothed recipe keeps
    # a margin over the 0.99 bar (plain per-channel reaches 0.992).
    shipped = resolve_onnx(ALL_MINILM_L6_V2_INT8)
    mean, low = compare(SHIPPED_MINILM, shipped, copy)
    assert mean >= 0.995 and low > 0.97
    assert abs(mean - manifest["mean_cosine"]) < 1e-4
    # A text's vector does not depend on its batch-mates.
    batch_mean, batch_low = batch_consistency(SHIPPED_MINILM, copy)
    assert batch_low >= rq.MIN_BATCH_COSINE and manifest["batch_min_cosine"] >= rq.MIN_BATCH_COSINE
    # It computes in int8: integer matmuls, no per-run activation scale (LayerNorm-fed
    # inputs have fixed ones, the attention and GELU outputs per-token ones);
    # every FFN up-projection is smoothed; all 36 weight MatMuls run in int8.
    graph = onnx.load(str(copy)).graph
    ops = [n.op_type for n in graph.node]
    assert {"MatMulIntegerToFloat", "QuantizeLinear", "Gelu"} <= set(ops)
    assert "DynamicQuantizeLinear" not in ops and "Erf" not in ops
    assert ops.count("MatMulIntegerToFloat") == 36 and ops.count("Gelu") == 6
    scales = manifest["activation_scales"]
    assert (len(scales["static"]), len(scales["per_token"])) == (12, 12)
    names = {n.name for n in graph.node}
    assert len(manifest["smoothed_nodes"]) == 6 and manifest["fp32_nodes"] == []
    assert {f"{n}_smooth" for n in manifest["smoothed_nodes"]} <= names
    # The GPU still gets the shipped graph.
    assert resolve_onnx(spec, gpu=True) == shipped


def test_second_call_reuses_the_copy(requantized_cache: Path) -> None:
    copy, manifest_path = _files(requantized_cache)
    before = (copy.stat().st_mtime_ns, manifest_path.stat().st_mtime_ns)
    found = rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, requantized_cache)
    assert not found.built and found.path == copy
    assert prepare_model(NAME, requantized_cache) == prepare_model(NAME, requantized_cache)
    assert (copy.stat().st_mtime_ns, manifest_path.stat().st_mtime_ns) == before


def test_corrupted_copy_is_rebuilt(requantized_cache: Path, tmp_path: Path) -> None:
    shutil.copytree(requantized_cache / NAME, tmp_path / NAME)
    copy, manifest_path = _files(tmp_path)
    good = json.loads(manifest_path.read_text())["sha256"]
    with open(copy, "r+b") as fh:
        fh.seek(-5000, 2)
        chunk = fh.read(8)
        fh.seek(-5000, 2)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    assert sha256_file(copy) != good
    rebuilt = rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, tmp_path)
    assert rebuilt.built and sha256_file(copy) == rebuilt.sha256
    assert json.loads(manifest_path.read_text())["sha256"] == rebuilt.sha256
    # Nor does one whose copy gave a text another vector inside a batch.
    data = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**data, "batch_min_cosine": 0.999}))
    assert rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, tmp_path).built
    # A manifest about another source file does not vouch for the copy either.
    data = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**data, "source_sha256": "0" * 64}))
    assert rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, tmp_path).built
    assert not rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, tmp_path).built


_CHILD = """
import json, sys
from models import requantize
found = requantize.ensure_quantized_copy(
    requantize.get_spec("all-minilm-l6-v2-int8"), requantize.Path(sys.argv[1])
)
print(json.dumps({"built": found.built, "sha256": found.sha256}))
"""


def test_concurrent_first_starts_build_one_copy(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp_path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["built"] for r in results) == [False, True]
    assert results[0]["sha256"] == results[1]["sha256"]
    copy, manifest_path = _files(tmp_path)
    assert sha256_file(copy) == json.loads(manifest_path.read_text())["sha256"]
    leftovers = {p.name for p in (tmp_path / NAME).iterdir()}
    assert leftovers == {copy.name, manifest_path.name, f".{STEM}.lock"}


def test_disagreeing_copy_is_refused_with_the_figure(
    requantized_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Per-tensor weight scales lose too much on MiniLM.
    per_tensor = dataclasses.replace(ALL_MINILM_L6_V2_INT8, requantize="per_tensor")
    with pytest.raises(RequantizeError, match=r"below the required 0\.99") as refused:
        prepare_model(per_tensor, tmp_path)
    figure = re.search(r"mean cosine (0\.\d{4}) \(min", str(refused.value))
    assert figure is not None and float(figure.group(1)) < 0.99
    assert not list((tmp_path / NAME).glob("model.per_tensor*"))
    # A stricter bar refuses even a cached copy instead of using it.
    monkeypatch.setattr(rq, "MIN_MEAN_COSINE", 1.01)
    shutil.copytree(requantized_cache / NAME, tmp_path / "strict" / NAME)
    with pytest.raises(RequantizeError, match=r"mean cosine 0\.99\d\d .* below .* 1\.01"):
        load_encoder(NAME, device="cpu", models_dir=tmp_path / "strict")
    assert issubclass(RequantizeError, ModelSpecError)


def test_load_encoder_runs_the_quantised_copy(requantized_cache: Path) -> None:
    copy, _ = _files(requantized_cache)
    encoder = load_encoder(NAME, device="cpu", threads=1, models_dir=requantized_cache)
    assert encoder.onnx_path == copy and encoder.spec.name == NAME
    texts = ["I'm allergic to peanuts.", "My daughter starts school in September."]
    docs = encoder.encode(texts)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = encoder.encode(["Which foods can't I eat?"], is_query=True)[0]
    assert int(np.argmax(docs @ query)) == 0
    shipped = load_encoder(SHIPPED_MINILM, device="cpu", threads=1).encode(texts)
    assert float((docs * shipped).sum(axis=1).min()) > 0.98


def _varied_texts() -> list[str]:
    """64 texts from 1 to ~120 tokens: short chat turns, questions, long passages, odd ones."""
    subjects = ["I", "My sister", "Our team", "The customer", "Dr. Müller", "We", "She", "Alex"]
    things = [
        "moved to Lisbon in 2021",
        "is allergic to peanuts and shellfish",
        "prefers window seats on long-haul flights",
        "deploys the release on Thursday after the load test",
        "paid 3,450.99 EUR for order #48213 (shipped via DHL)",
        "runs Kubernetes on GCP with a staging cluster half the size of production",
        "wants a rollback plan the on-call engineer can run alone",
        "likes 🍣 and 🍜 but not spicy food",
    ]
    texts = [f"{s} {t}." for s in subjects for t in things][:48]
    texts += ["ok", "?", "Thanks!", "北京是中国的首都。", "SELECT * FROM users WHERE id = 42;"]
    texts += [" ".join(texts[i : i + 9]) for i in range(0, 44, 4)]
    return texts[:64]


def test_a_texts_vector_does_not_depend_on_its_batch(requantized_cache: Path) -> None:
    """Alone, in one padded batch of 64, or in a shuffled split: the same vector (float noise)."""
    encoder = load_encoder(
        NAME, device="cpu", threads=1, models_dir=requantized_cache, max_batch_tokens=1_000_000
    )
    texts = _varied_texts()
    assert len(texts) == 64 and len(set(texts)) == 64
    alone = np.concatenate([encoder.encode([text]) for text in texts])
    batched = encoder.encode(texts)
    order = np.random.default_rng(7).permutation(len(texts))
    split = np.empty_like(alone)
    for part in np.array_split(order, 3):
        split[part] = encoder.encode([texts[i] for i in part])
    for other in (batched, split):
        gap = np.abs(1.0 - (alone * other).sum(axis=1))
        assert float(gap.max()) < 1e-5, f"max cosine gap {gap.max():.2e}"


def test_specs_without_requantize_are_untouched(tmp_path: Path) -> None:
    assert prepare_model(SHIPPED_MINILM, tmp_path) is SHIPPED_MINILM
    bge = get_spec("bge-small-en-v1.5", models_dir=tmp_path)
    assert prepare_model(bge, tmp_path) is bge
    assert list(tmp_path.iterdir()) == []


def test_another_mode_or_recipe_builds_its_own_copy(
    requantized_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(requantized_cache / NAME, tmp_path / NAME)
    plain = dataclasses.replace(ALL_MINILM_L6_V2_INT8, requantize="per_channel")
    other = rq.ensure_quantized_copy(plain, tmp_path)
    assert other.built and other.path.name.startswith("model.per_channel-")
    assert other.manifest["smoothed_nodes"] == other.manifest["fp32_nodes"] == []
    # Per-run activation scales: the batch check sees the dependence the default avoids.
    assert other.manifest["batch_min_cosine"] < 0.9999 < 1 - 1e-5 <= rq.MIN_BATCH_COSINE
    # The default's copy is untouched and still found.
    assert not rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, tmp_path).built
    # A changed recipe under the same mode name is a new file, not the old copy;
    # a MatMul kept in fp32 stays a float MatMul beside the rescaled int8 ones.
    changed = dataclasses.replace(rq.RECIPES[MODE], alpha=0.5, keep_fp32=(("ffn_down", 0),))
    monkeypatch.setitem(rq.RECIPES, MODE, changed)
    rebuilt = rq.ensure_quantized_copy(ALL_MINILM_L6_V2_INT8, tmp_path)
    assert rebuilt.built and rebuilt.path != _files(tmp_path)[0]
    assert rebuilt.manifest["recipe"]["alpha"] == 0.5
    assert rebuilt.manifest["batch_min_cosine"] >= rq.MIN_BATCH_COSINE
    graph = onnx.load(str(rebuilt.path)).graph
    kept = [n for n in graph.node if n.name in rebuilt.manifest["fp32_nodes"]]
    assert len(rebuilt.manifest["fp32_nodes"]) == 1 and [n.op_type for n in kept] == ["MatMul"]
    assert [n.op_type for n in graph.node].count("MatMulIntegerToFloat") == 35


def test_spec_field_round_trips_and_is_checked() -> None:
    data = ALL_MINILM_L6_V2_INT8.to_json()
    assert data["requantize"] == MODE
    assert ModelSpec.from_json(data).requantize == MODE
    assert "requantize" not in SHIPPED_MINILM.to_json()
    with pytest.raises(ModelSpecError, match="requantize"):
        dataclasses.replace(ALL_MINILM_L6_V2_INT8, requantize="per_row")  # type: ignore[arg-type]


def test_every_mode_has_a_recipe() -> None:
    """The spec's mode names come from its Literal; each one needs a recipe here."""
    assert set(rq.RECIPES) == set(REQUANTIZE_MODES)
    assert MODE in REQUANTIZE_MODES and "per_row" not in REQUANTIZE_MODES
