"""``python -m models list`` / ``check`` (the export command is covered in test_export)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.__main__ import main


def test_list_and_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from serve_app.settings import get_settings

    monkeypatch.setenv("MEMSERVE_MODELS_CACHE", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert main(["list"]) == 0
        out = capsys.readouterr().out
        assert "all-minilm-l6-v2-int8" in out and "bge-small-en-v1.5" in out
        assert str(tmp_path) in out
        assert main(["check", "all-minilm-l6-v2-int8", "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        # The default model runs the int8 copy built into this models cache.
        assert "384-d" in out and str(tmp_path / "all-minilm-l6-v2-int8") in out
        assert "/model.per_channel_smooth-" in out and ".onnx on cpu" in out
    finally:
        get_settings.cache_clear()
