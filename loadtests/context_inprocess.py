"""What loadtests/profile_context.py measures besides CPU (issue 29): the encoder's
share of a call, and the blocks' quality by bench_context's own scoring, in process.

bench_context.py scores blocks through the service (Ray, HTTP); a change that cuts a
context call's CPU must keep the quality, and checking that in process (the same
composition root, real PostgreSQL, the real int8 encoder) takes seconds, not minutes:

- :class:`EncodeMeter`: texts, ONNX Runtime runs, padded tokens and the encoder's
  thread CPU per call (the encoder runs on the query embedder's worker thread, which
  cProfile does not see);
- :func:`load_labelled` / :func:`block_outcome` / :func:`quality`: the users written
  as bench_context's ``typed``/``untyped`` sources (API adds), each block scored by
  :mod:`loadtests.context_metrics` (needed recall, unneeded share of the retrieved
  section, calibration and held-out halves: even and odd message positions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from loadtests.context_metrics import Labels, Outcome, outcome, summarise
from serve_app.store import NewMemory, Owner


class EncodeMeter:
    """Wraps an encoder's ``encode`` and ``_run`` (instance attributes, this encoder
    only) to count what a call costs the encoder; thread CPU, so other threads and
    processes do not count."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.texts = self.runs = self.padded = 0
        self.cpu_s = 0.0
        self._lock = threading.Lock()
        encode, views, run = encoder.encode, encoder.encode_views, encoder._run

        def metered(method: Any) -> Any:
            def call(texts: Sequence[str], *args: Any, **kw: Any) -> Any:
                t0 = time.thread_time()
                try:
                    return method(texts, *args, **kw)
                finally:
                    with self._lock:
                        self.texts += len(texts)
                        self.cpu_s += time.thread_time() - t0

            return call

        def metered_run(ids: list[list[int]], *args: Any) -> Any:
            with self._lock:
                self.runs += 1
                self.padded += len(ids) * max(len(x) for x in ids)
            return run(ids, *args)

        encoder.encode, encoder.encode_views = metered(encode), metered(views)
        encoder._run = metered_run

    def reset(self) -> None:
        with self._lock:
            self.texts = self.runs = self.padded = 0
            self.cpu_s = 0.0

    def per_call(self, calls: int) -> dict[str, float]:
        n = max(1, calls)
        return {
            "encoder_cpu_ms_per_call": round(self.cpu_s * 1000 / n, 3),
            "texts_per_call": round(self.texts / n, 3),
            "runs_per_call": round(self.runs / n, 3),
            "padded_tokens_per_call": round(self.padded / n, 2),
        }

    def close(self) -> None:
        """The encoder's own methods back."""
        for name in ("encode", "encode_views", "_run"):
            self.encoder.__dict__.pop(name, None)


async def load_labelled(
    services: Any, data: dict, prefix: str, typed: bool, tenant: str
) -> tuple[dict[str, Owner], dict[str, Labels]]:
    """Every user's memories and facts added as the API adds them (typed or untyped);
    the owners, and each user's labels (id -> key, the profile keys) by user id."""
    owners: dict[str, Owner] = {}
    labels: dict[str, Labels] = {}
    for u in data["users"]:
        owner = Owner(tenant, f"{prefix}-{u['id']}")
        lab = Labels()
        items = [NewMemory(m["content"], m["type"] if typed else "semantic") for m in u["memories"]]
        rows = await services.memories.add(owner, items, actor="bench")
        for m, row in zip(u["memories"], rows, strict=True):
            lab.key_of[str(row["id"])] = m["key"]
        for f in u.get("facts", []):
            row = await services.facts.set(owner, f["category"], f["key"], f["value"])
            lab.key_of[str(row["id"])] = f"fact:{f['category']}.{f['key']}"
        lab.profile_keys = {m["key"] for m in u["memories"] if m["cls"]} | {
            f"fact:{f['category']}.{f['key']}" for f in u.get("facts", []) if f.get("cls")
        }
        owners[u["id"]], labels[u["id"]] = owner, lab
    return owners, labels


def block_outcome(
    lab: Labels, needs: Sequence[str], block: Any, helpful: Sequence[str] = ()
) -> Outcome:
    """A ContextResult as bench_context.ask reads the response: profile ids (the profile
    section and the facts whose ``why`` says profile), then the other items."""
    in_profile = lambda f: str(f.get("why") or "").startswith("profile")  # noqa: E731
    prof = [x["id"] for x in block.profile] + [f["id"] for f in block.facts if in_profile(f)]
    other = [x["id"] for x in block.memories]
    other += [f["id"] for f in block.facts if not in_profile(f)]
    cost = {"tokens": block.tokens, "profile_tokens": block.profile_tokens}
    return outcome(lab, needs, prof, other, helpful, **cost)


def quality(outs: Sequence[tuple[int, str, Outcome]], labels: dict[str, Labels]) -> dict:
    """bench_context's figures (keys qualified by user) per half and overall."""

    def qualified(seq: Sequence[tuple[int, str, Outcome]]) -> list[Outcome]:
        res = []
        for _, user, o in seq:
            q = lambda keys, u=user: frozenset(f"{u}/{k}" for k in keys)  # noqa: E731
            res.append(
                Outcome(q(o.needed), q(o.got), q(o.outside_profile), o.tokens, o.profile_tokens)
            )
        return res

    prof = {f"{u}/{k}" for u, lab in labels.items() for k in lab.profile_keys}
    keep = ("needed_recall", "retrieved_unneeded_share", "unneeded_share", "tokens_mean")
    halves = {
        "calibration": [x for x in outs if x[0] % 2 == 0],
        "held_out": [x for x in outs if x[0] % 2 == 1],
        "all": list(outs),
    }
    out: dict[str, Any] = {}
    for half, seq in halves.items():
        s = summarise(qualified(seq), prof)
        out[half] = {k: s[k] for k in keep}
    out["detail"] = [
        {
            "i": i,
            "user": user,
            "missing": sorted(o.needed - o.got),
            "unneeded": sorted(o.outside_profile - o.needed),
        }
        for i, user, o in outs
        if o.needed - o.got or o.outside_profile - o.needed
    ]
    return out


async def add_conversation(services: Any, conv: dict, tenant: str, prefix: str) -> Owner:
    """A LoCoMo conversation's turns added as one user's memories (dia_id in metadata)."""
    from loadtests.eval_retrieval import locomo_items

    owner = Owner(tenant, f"{prefix}-locomo-{conv['sample_id']}")
    items = [NewMemory(x["content"], metadata=x["metadata"]) for x in locomo_items(conv)]
    for i in range(0, len(items), 100):
        await services.memories.add(owner, items[i : i + 100], actor="bench")
    return owner


async def locomo_recall(
    services: Any, convs: Sequence[dict], queries: int, tenant: str, prefix: str
) -> dict[str, Any]:
    """LoCoMo dev evidence in the context block (bench_context's ``context_block_recall``,
    in process): each conversation's turns added as memories (dia_id in metadata), its
    first ``queries`` questions asked; the share of each one's evidence turns that are
    among the block's memories or profile, averaged."""
    from loadtests.eval_retrieval import evidence_ids, locomo_qa

    recalls, cpu_s = [], 0.0
    for conv in convs:
        owner = await add_conversation(services, conv, tenant, prefix)
        for q in locomo_qa(conv, queries or None):
            gold = evidence_ids(q["evidence"])
            cpu0 = time.process_time()  # this process's CPU: the app and the encoder
            block = await services.context.build(owner, q["question"])
            cpu_s += time.process_time() - cpu0
            got = {(m.get("metadata") or {}).get("dia_id") for m in block.memories + block.profile}
            recalls.append(len(gold & got) / len(gold))
    return {
        "questions": len(recalls),
        "context_block_recall": round(sum(recalls) / max(1, len(recalls)), 4),
        "process_cpu_ms_per_question": round(cpu_s * 1000 / max(1, len(recalls)), 3),
    }
