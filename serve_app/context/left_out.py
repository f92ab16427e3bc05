"""What a context block did not show, and the rule that left each candidate out.

``/v1/context?explain=true`` answers it (``left_out``) so an operator can see a miss:
a memory the search found but the evidence gate (or a re-scoring judge) refused, one
past ``top_k``, one the token budget had no room for, a near-copy of a shown one, a
profile memory over the profile section's share. The builder calls
:meth:`LeftOut.drop` at each cut with the list before and after it; the first rule that
drops a candidate is the one reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Row = dict[str, Any]


def _key(row: Row) -> str:
    return str(row["id"])


class LeftOut:
    """The candidates left out so far, in the order the rules dropped them."""

    def __init__(self) -> None:
        self.items: list[Row] = []
        self._seen: set[str] = set()

    def drop(
        self, before: Sequence[Row], after: Iterable[Row], rule: str, detail: str | None = None
    ) -> None:
        """Record the rows of ``before`` that are not in ``after`` (by id) under ``rule``."""
        kept = {_key(r) for r in after}
        for row in before:
            if _key(row) not in kept:
                self.add(row, rule, detail)

    def add(self, row: Row, rule: str, detail: str | None = None) -> None:
        key = _key(row)
        if key in self._seen:
            return
        self._seen.add(key)
        fact = "content" not in row
        sim = row.get("best_similarity", row.get("similarity"))
        if rule == "gate" and detail is None and sim is not None:
            detail = f"no evidence from the message (best cosine {float(sim):.2f})"
        self.items.append(
            {
                "id": row["id"],
                "content": f"{row['key']}: {row['value']}" if fact else row["content"],
                "type": "fact" if fact else row.get("type"),
                "rule": rule,
                "detail": detail,
                "score": row.get("score"),
                "similarity": sim,
                "rerank_score": row.get("rerank_score"),
            }
        )

    def shown(self, rows: Iterable[Row]) -> None:
        """Rows that are in the block after all (a later section showed them): not left out."""
        keys = {_key(r) for r in rows}
        self.items = [i for i in self.items if str(i["id"]) not in keys]
