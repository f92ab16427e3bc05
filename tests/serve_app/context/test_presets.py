"""serve_app.settings.CONTEXT_PRESETS: the context benchmarks' named lever sets are real
ContextSettings fields, and read the same from the environment as from ``with_``."""

from __future__ import annotations

import pytest

from serve_app.settings import CONTEXT_PRESETS, ContextSettings, Settings


@pytest.mark.parametrize("name", sorted(CONTEXT_PRESETS))
def test_a_preset_is_context_fields_and_reads_the_same_from_the_environment(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    preset = CONTEXT_PRESETS[name]
    fields = ContextSettings.model_fields
    assert all(k in fields and fields[k].annotation is bool for k in preset), preset
    for k, v in preset.items():
        monkeypatch.setenv(f"MEMSERVE_CONTEXT_{k.upper()}", str(v).lower())
    assert ContextSettings() == Settings().with_(context=preset).context


def test_all_is_the_defaults_and_baseline_turns_the_levers_off() -> None:
    assert CONTEXT_PRESETS["all"] == {}
    assert not any(CONTEXT_PRESETS["baseline"].values())
