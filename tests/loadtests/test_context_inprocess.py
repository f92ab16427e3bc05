"""loadtests/profile_context.py's helpers (issue 29's CPU cut): the variants as settings,
the encoder's meter, and bench_context's scoring of in-process blocks."""

from __future__ import annotations

import numpy as np
import pytest

from loadtests.context_inprocess import EncodeMeter, block_outcome, quality
from loadtests.context_metrics import Labels
from loadtests.profile_context import context_fields
from serve_app.context import ContextResult
from serve_app.settings import Settings


@pytest.fixture(scope="module")
def encoder():
    """The real int8 MiniLM (its own copy: the meter wraps this object's methods)."""
    from models import load_encoder

    return load_encoder("all-minilm-l6-v2-int8", device="cpu", threads=1)


def test_variants_are_context_settings():
    assert context_fields("all") == {}
    assert context_fields("encoded") == {"pooled_time_free": False, "pooled_parts": False}
    assert context_fields("baseline")["profile"] is False
    s = Settings().with_(context=context_fields("encoded"))
    assert not s.context.pooled_parts and Settings().context.pooled_parts  # default: pooled


def test_the_meter_counts_what_the_encoder_ran(encoder):
    meter = EncodeMeter(encoder)
    try:
        encoder.encode(["hello there", "a much longer text about the weather today"])
        encoder.encode_views(["tea on Saturday"], [[((0, 3),)]], is_query=True)
        got = meter.per_call(2)
        assert got["texts_per_call"] == 1.5 and got["runs_per_call"] == 1.0
        assert got["padded_tokens_per_call"] > 0 and got["encoder_cpu_ms_per_call"] > 0
        meter.reset()
        assert meter.per_call(1)["texts_per_call"] == 0
    finally:
        meter.close()
    assert "encode" not in vars(encoder) and "_run" not in vars(encoder)
    assert np.asarray(encoder.encode(["x"])).shape == (1, 384)


def test_blocks_are_scored_as_bench_context_scores_them():
    lab = Labels(
        {"m1": "allergy", "m2": "city", "m3": "tennis", "f1": "fact:identity.name"},
        {"allergy", "fact:identity.name"},
    )
    block = ContextResult(
        "ctx",
        memories=[{"id": "m2"}, {"id": "m3"}],
        facts=[{"id": "f1", "why": "profile: identity"}],
        profile=[{"id": "m1"}],
        tokens=40,
        profile_tokens=10,
    )
    o = block_outcome(lab, ["allergy", "city"], block)
    assert o.got == {"allergy", "city", "tennis", "fact:identity.name"}
    assert o.outside_profile == {"city", "tennis"}
    q = quality([(0, "anna", o), (1, "anna", block_outcome(lab, ["tennis"], block))], {"anna": lab})
    assert q["calibration"]["needed_recall"] == 1.0
    assert q["calibration"]["retrieved_unneeded_share"] == 0.5  # tennis, not needed
    assert q["held_out"]["retrieved_unneeded_share"] == 0.5  # city, not needed
    assert [d["i"] for d in q["detail"]] == [0, 1]
