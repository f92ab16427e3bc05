"""The profile rule's fit: only calibration material is fitted on, and the weights the
settings ship are the ones the script fits."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loadtests import profile_admission
from loadtests.context_admission import fit
from serve_app.settings import ContextSettings


@pytest.fixture(scope="module")
def items():
    rows = profile_admission.labelled()
    asyncio.run(profile_admission.featured(rows))
    return rows


def test_the_report_users_are_never_fitted_on(items):
    sets = {i["set"] for i in items}
    assert sets == {"calibration", "report", "team"}
    x, y = profile_admission.matrix(items, ("calibration", "team"), ("typed", "untyped"))
    fitted = sum(1 for i in items if i["set"] != "report")
    assert len(y) == 2 * fitted  # each memory once typed, once untyped
    assert 0 < y.sum() < len(y)


def test_the_shipped_weights_are_the_fit(items):
    x, y = profile_admission.matrix(items, ("calibration", "team"), ("typed", "untyped"))
    w = fit(x, y, 1.0)
    shipped = np.asarray(ContextSettings().profile_learned)
    # int8 kernels differ a little between CPUs (VNNI or not): close, not equal
    assert np.allclose(w, shipped, atol=0.05), np.round(w, 4).tolist()
    figures = profile_admission.scored(w, *profile_admission.matrix(items, ("report",), ("typed",)))
    assert figures["0.3"]["recall"] > 0.8  # the report users' profile material is found
