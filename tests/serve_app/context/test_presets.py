"""serve_app.settings.CONTEXT_PRESETS: the context benchmarks' named lever sets are real
ContextSettings fields, and read the same from the environment as from ``with_``."""

from __future__ import annotations

import pytest

from serve_app.settings import CONTEXT_PRESETS, ContextSettings, Settings, preset_env


@pytest.mark.parametrize("name", sorted(CONTEXT_PRESETS))
def test_a_preset_is_context_fields_and_reads_the_same_from_the_environment(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    preset = CONTEXT_PRESETS[name]
    assert set(preset) <= set(ContextSettings.model_fields), preset
    for k, v in preset_env(preset).items():
        monkeypatch.setenv(k, v)
    assert ContextSettings() == Settings().with_(context=preset).context
    if preset:  # and is not the defaults (model_construct reads no environment)
        assert Settings().with_(context=preset).context != ContextSettings.model_construct()


def test_all_is_the_defaults_and_baseline_turns_the_levers_off() -> None:
    assert CONTEXT_PRESETS["all"] == {}
    assert not any(CONTEXT_PRESETS["baseline"].values())
