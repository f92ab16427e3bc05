"""Fit the learned profile rule: which memories an always-present profile holds.

The hand-set profile thresholds (cue hits, prototype similarity) were set on the team's
own memories (loadtests/data/context_bench.json: 95% of its profile material found); on
the implicit-needs set, written by someone else, they find 39%, and a profile item a
message needs but the profile left out is the block's most common miss. This fits a
logistic regression over ``serve_app.profile.classify.PROFILE_FEATURES`` (the class
similarities and cue hits the rule already had, the memory's type, its length, whether
the model reads its language) on memories labelled by the sets: the implicit-needs
calibration users (u01-u15; each user's ``profile`` keys) and the team's set (its
``cls``), each memory once typed and once untyped, as platforms send both. The
implicit-needs report users (u16-u30) are printed beside it and never fitted on.

    python -m loadtests.profile_admission [--l2 1.0]

Prints precision and recall per set and probability bar, the weights as
``MEMSERVE_CONTEXT_PROFILE_LEARNED``, and writes loadtests/results/profile_admission-*.json.
The bar is then chosen with loadtests/context_levers.py on the calibration half.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests import implicit_needs  # noqa: E402
from loadtests.bench_context import DATA  # noqa: E402
from loadtests.context_admission import fit  # noqa: E402
from loadtests.harness import write_json  # noqa: E402
from models import load_encoder  # noqa: E402
from serve_app.profile.classify import (  # noqa: E402
    PROFILE_FEATURES,
    ProfileClassifier,
    profile_features,
)

SLUG = "all-minilm-l6-v2-int8"
BARS = (0.29, 0.3, 0.4, 0.5, 0.6)


def labelled() -> list[dict[str, Any]]:
    """Every memory of both sets: its text, type (None: untyped), set and label."""
    out = []
    for u in implicit_needs.load()["users"]:
        part = "calibration" if implicit_needs.half_of(u["id"]) == "calibration" else "report"
        for m in u["memories"]:
            y = m["cls"] is not None
            out.append({"set": part, "text": m["content"], "type": m["type"], "y": y})
    for u in json.loads(DATA.read_text())["users"]:
        for m in u["memories"]:
            y = bool(m.get("cls"))
            out.append({"set": "team", "text": m["content"], "type": m["type"], "y": y})
    return out


async def featured(items: list[dict[str, Any]]) -> None:
    """Each item's features, typed (its own type) and untyped ("semantic")."""
    encoder = load_encoder(SLUG, threads=1)

    async def embed(texts: list[str], is_query: bool = False) -> np.ndarray:
        return encoder.encode(texts, is_query=is_query)

    protos = await ProfileClassifier(embed).prototypes()
    assert protos is not None
    vectors = encoder.encode([i["text"] for i in items])
    for item, v in zip(items, vectors, strict=True):
        sims = {c: float(np.max(p @ v)) for c, p in protos.items()}
        item["typed"] = profile_features(item["text"], item["type"] or "semantic", sims)
        item["untyped"] = profile_features(item["text"], "semantic", sims)


def matrix(items: list[dict[str, Any]], sets: tuple[str, ...], modes: tuple[str, ...]):
    rows = [(i[m], i["y"]) for i in items if i["set"] in sets for m in modes]
    x = np.asarray([r[0] for r in rows], dtype=np.float64)
    return x, np.asarray([float(r[1]) for r in rows])


def scored(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict[str, dict[str, float]]:
    p = 1.0 / (1.0 + np.exp(-(np.hstack([x, np.ones((len(x), 1))]) @ w)))
    out = {}
    for bar in BARS:
        picked = p >= bar
        tp = float((picked & (y == 1)).sum())
        out[str(bar)] = {
            "precision": round(tp / max(1.0, float(picked.sum())), 3),
            "recall": round(tp / max(1.0, float(y.sum())), 3),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--l2", type=float, default=1.0)
    args = ap.parse_args()
    items = labelled()
    asyncio.run(featured(items))
    x, y = matrix(items, ("calibration", "team"), ("typed", "untyped"))
    w = fit(x, y, args.l2)
    print(f"fitted on {len(y)} rows ({int(y.sum())} profile material)")
    print("weights:", dict(zip([*PROFILE_FEATURES, "bias"], np.round(w, 3).tolist(), strict=True)))
    report: dict[str, Any] = {}
    for part in ("calibration", "team", "report"):
        for mode in ("typed", "untyped"):
            px, py = matrix(items, (part,), (mode,))
            report[f"{part}/{mode}"] = figures = scored(w, px, py)
            row = "  ".join(
                f"p>={b}: P {f['precision']:.2f} R {f['recall']:.2f}" for b, f in figures.items()
            )
            print(f"{part:>11} {mode:>7}  {row}")
    weights = np.round(w, 4).tolist()
    print("MEMSERVE_CONTEXT_PROFILE_LEARNED=" + json.dumps(weights))
    path = write_json("profile_admission", {"l2": args.l2, "weights": weights, "report": report})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
