"""``../shared/data/implicit_needs/dev.json`` in the shape of loadtests/bench_context.py.

The set was written outside the team (30 users, 404 memories, 389 messages; its README
gives the format and the labelling rules). It is split once, by user: u01-u15 are the
calibration half (anything tuned is tuned there), u16-u30 the report half (never tuned
on). Each message keeps its ``kind`` (implicit, explicit, multi, none, distractor) and its
``helpful`` keys, which count neither for nor against a block. A memory the set puts in
the user's always-present profile is profile material (``cls`` "profile": the set gives
membership, not a class). ``type`` is the platform's (None: untyped, half of them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# ../shared from the main checkout, ../../shared from a worktree under /work/wt
DEV = next(
    (
        p / "shared" / "data" / "implicit_needs" / "dev.json"
        for p in (ROOT.parent, ROOT.parent.parent)
        if (p / "shared" / "data" / "implicit_needs" / "dev.json").exists()
    ),
    ROOT.parent / "shared" / "data" / "implicit_needs" / "dev.json",
)
CALIBRATION_USERS = frozenset(f"u{i:02d}" for i in range(1, 16))
KINDS = ("implicit", "explicit", "multi", "none", "distractor")


def half_of(user: str) -> str:
    return "calibration" if user in CALIBRATION_USERS else "held_out"


def load(path: Path = DEV) -> dict[str, Any]:
    """The set as bench_context data: users with keyed memories, messages with their
    needs, helpful keys, kind and half."""
    raw = json.loads(path.read_text())
    users = []
    for uid, user in sorted(raw["users"].items()):
        profile = set(user.get("profile") or ())
        memories = [
            {
                "key": key,
                "content": m["text"],
                "type": m["type"],  # None: the platform sent none
                "cls": "profile" if key in profile else None,
            }
            for key, m in user["memories"].items()
        ]
        users.append({"id": uid, "memories": memories})
    messages = [
        {
            "user": c["user"],
            "text": c["message"],
            "needs": list(c["need"]),
            "helpful": list(c.get("helpful") or ()),
            "kind": c["kind"],
            "half": half_of(c["user"]),
        }
        for c in raw["cases"]
    ]
    return {"users": users, "messages": messages, "source": str(path)}
