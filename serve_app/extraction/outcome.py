"""What one extraction run did (tests, logs and the extractor deployment's answer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """What one ``process_session`` call did (for tests, logs and the deployment's answer)."""

    turns_extracted: int = 0
    saved: int = 0
    merged: int = 0
    skipped: int = 0
    facts: dict[str, int] = field(default_factory=dict)
    summaries: int = 0
    junk_dropped: int = 0
    ungrounded: int = 0  # items dropped: copied from the known block (grounding.py)
    error: str | None = None
    deferred: str | None = None  # over a token budget: when the work resumes (ISO time)
    # mem0's event list: {id, memory, event: ADD|UPDATE|DELETE|NONE, previous_memory?}
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def merge(self, other: Outcome) -> Outcome:
        """Both runs' work (a scheduler re-run adds to what the first run did)."""
        facts = dict(self.facts)
        for k, v in other.facts.items():
            facts[k] = facts.get(k, 0) + v
        return Outcome(
            turns_extracted=self.turns_extracted + other.turns_extracted,
            saved=self.saved + other.saved,
            merged=self.merged + other.merged,
            skipped=self.skipped + other.skipped,
            facts=facts,
            summaries=self.summaries + other.summaries,
            junk_dropped=self.junk_dropped + other.junk_dropped,
            ungrounded=self.ungrounded + other.ungrounded,
            error=other.error,
            deferred=other.deferred,
            events=self.events + other.events,
        )
