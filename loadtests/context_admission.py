"""Fit the learned admission of the evidence rule on the implicit-needs calibration half.

The rule's hand-set thresholds fit the set they were tuned on. This fits a logistic
regression over the features the rule can see for each candidate of a message
(``serve_app.context.evidence.features``: judged cosine, distance below the message's
best, shared content words, rank, what time words added) on the candidates the rule
leaves out, labelled by the set (needed or not; ``helpful`` keys are left out of the
fit), u01-u15 only (``--with-team``: and the team's set's calibration half). The
weights are printed as ``MEMSERVE_CONTEXT_EVIDENCE_LEARNED`` (one per feature, then the
bias), with the candidates' precision and recall per probability bar; the bar is then
chosen with loadtests/context_levers.py on the same half.

    python -m loadtests.context_admission [--l2 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests import implicit_needs  # noqa: E402
from loadtests.bench_context import DATA, half_of  # noqa: E402
from loadtests.context_inprocess import load_labelled  # noqa: E402
from loadtests.context_levers import SLUG, TENANT, load  # noqa: E402
from loadtests.harness import scratch_database  # noqa: E402
from models import load_encoder  # noqa: E402
from serve_app.context.evidence import FEATURES, features, stems  # noqa: E402
from serve_app.context.expand import expand_query  # noqa: E402
from serve_app.embedding_model import ModelFacts  # noqa: E402
from serve_app.services.context import levers  # noqa: E402
from serve_app.settings import Settings  # noqa: E402
from serve_app.testing.inprocess import in_process_services  # noqa: E402

TOP_K = 40  # every candidate the gate would see (the search asks for 2 x top_k per part)


def left_out(block, text: str, ev) -> list[tuple[dict, list[float]]]:
    """The block's candidates the rule leaves out, each with its features (what the
    learned admission would see), in the block's order."""
    message = stems(expand_query(text, ()))
    cands = list(block.memories)
    judged = [
        ev.similar(m.get("best_similarity", m.get("similarity")), m.get("topic_similarity"))
        for m in cands
    ]
    best = max(judged, default=-1.0)
    out = []
    for i, (m, cosine) in enumerate(zip(cands, judged, strict=True)):
        plain = float(m.get("best_similarity", m.get("similarity")) or -1.0)
        st = stems(m["content"])
        if ev.why(plain, st, message, best, m.get("topic_similarity")) is not None:
            continue  # the rule admits it: not the model's to decide
        out.append((m, features(cosine, plain, best, len(ev.shared(st, message)), i)))
    return out


async def candidates(
    dsn: str, encoder, data: dict, half: str, team: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of the candidates the rule leaves out, for ``half``'s messages:
    the block built with the gate off, no budget cut, every candidate kept. ``team``:
    the team's set (its halves by position)."""
    settings = Settings().with_(context={"relevance_gate": False})
    ev = levers(Settings().context).evidence  # the rule as the defaults have it
    xs, ys = [], []
    async with in_process_services(settings, ModelFacts.of(encoder.spec), dsn, encoder) as s:
        if team:
            owners, labels = await load_labelled(s, data, "fit-team", True, TENANT)
        else:
            owners, labels = await load(s, data, f"fit-{half}", typed=True)
        for n, msg in enumerate(data["messages"]):
            if half_of(n, msg) != half:
                continue
            block = await s.context.build(
                owners[msg["user"]], msg["text"], token_budget=100_000, top_k=TOP_K
            )
            for m, x in left_out(block, msg["text"], ev):
                key = labels[msg["user"]].key(m["id"])
                if key is None or key in msg.get("helpful", ()):
                    continue
                xs.append(x)
                ys.append(1.0 if key in msg["needs"] else 0.0)
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


LOCOMO_CALIBRATION = ("conv-26", "conv-30")  # the later two are LoCoMo's report split


async def locomo_candidates(dsn: str, encoder) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of the candidates the rule leaves out for the questions of
    LoCoMo's calibration conversations (evidence turns needed, the rest not): questions
    that gather several turns, which the implicit-needs set has few of."""
    from loadtests.bench_context import LOCOMO
    from loadtests.context_inprocess import add_conversation
    from loadtests.eval_retrieval import evidence_ids, locomo_qa

    settings = Settings().with_(context={"relevance_gate": False})
    ev = levers(Settings().context).evidence
    xs, ys = [], []
    async with in_process_services(settings, ModelFacts.of(encoder.spec), dsn, encoder) as s:
        for conv in json.loads(LOCOMO.read_text()):
            if conv["sample_id"] not in LOCOMO_CALIBRATION:
                continue
            owner = await add_conversation(s, conv, TENANT, "fit")
            for q in locomo_qa(conv, None):
                gold = evidence_ids(q["evidence"])
                block = await s.context.build(
                    owner, q["question"], token_budget=100_000, top_k=TOP_K
                )
                for m, x in left_out(block, q["question"], ev):
                    xs.append(x)
                    ys.append(1.0 if (m.get("metadata") or {}).get("dia_id") in gold else 0.0)
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def fit(x: np.ndarray, y: np.ndarray, l2: float, iterations: int = 50) -> np.ndarray:
    """Logistic regression by Newton's method (IRLS) with an L2 penalty on the weights
    (not the bias); returns the weights, then the bias."""
    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    penalty = np.eye(a.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -60, 60)))
        grad = a.T @ (p - y) + penalty @ w
        hess = (a * (p * (1 - p))[:, None]).T @ a + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--with-team", action="store_true", help="fit on the team's set's half too")
    ap.add_argument(
        "--with-locomo", action="store_true", help="and LoCoMo's conv-26 and conv-30 questions"
    )
    args = ap.parse_args()
    data = implicit_needs.load()
    encoder = load_encoder(SLUG, threads=1)
    with scratch_database(encoder, "memserve-admission-") as (dsn, _):
        x, y = asyncio.run(candidates(dsn, encoder, data, "calibration"))
        if args.with_team:  # the team's calibration half too: one rule for both
            team = json.loads(DATA.read_text())
            tx, ty = asyncio.run(candidates(dsn, encoder, team, "calibration", team=True))
            x, y = np.vstack([x, tx]), np.concatenate([y, ty])
        if args.with_locomo:
            lx, ly = asyncio.run(locomo_candidates(dsn, encoder))
            x, y = np.vstack([x, lx]), np.concatenate([y, ly])
    w = fit(x, y, args.l2)
    p = 1.0 / (1.0 + np.exp(-(np.hstack([x, np.ones((len(x), 1))]) @ w)))
    print(f"candidates the rule leaves out: {len(y)}, needed: {int(y.sum())}")
    print("weights:", dict(zip([*FEATURES, "bias"], np.round(w, 3).tolist(), strict=True)))
    for bar in (0.2, 0.3, 0.4, 0.5, 0.6):
        picked = p >= bar
        tp = float((picked & (y == 1)).sum())
        print(
            f"  p >= {bar}: admits {int(picked.sum())}, precision"
            f" {tp / max(1, picked.sum()):.2f}, recall of the left-out needed {tp / y.sum():.2f}"
        )
    print("MEMSERVE_CONTEXT_EVIDENCE_LEARNED=" + json.dumps(np.round(w, 4).tolist()))


if __name__ == "__main__":
    main()
