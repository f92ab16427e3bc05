"""Synthetic users whose attributes change across dated sessions (bench_knowledge_update).

Each user lives through four dated sessions: moves, job changes, diet changes, a
relationship that moves on, a trip planned and then cancelled, with relative dates
("next Friday") the model resolves against the turn's date. Every user's names are
their own (a user id suffix), so nothing of one user matches another's text.

Also the scripted models that extract from these conversations: each knows which
memory a user turn states (the scenario's ground truth, as a perfect extractor would
write it) and decides against the aliases the prompt actually showed:

- ``good``: UPDATE the shown memory of the same attribute, NOOP an unchanged one,
  INVALIDATE a cancelled plan, ADD otherwise (it can only retire what it was shown);
- ``sloppy``: the same, but on 30% of calls it ADDs everything and 15% of its
  UPDATE/INVALIDATE targets are invented aliases;
- ``today``: ignores what it is shown and ADDs everything (extraction before issue 22).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from serve_app.testing.llm_server import shown

DATES = [datetime(2026, m, d, 10, tzinfo=UTC) for m, d in ((1, 12), (3, 16), (6, 22), (9, 28))]
CITIES = ["Paris", "Berlin", "Lisbon", "Oslo", "Vienna", "Prague", "Madrid", "Dublin"]
JOBS = [
    ("nurse", "St Mary"),
    ("teacher", "Hillside School"),
    ("data analyst", "Northwind"),
    ("chef", "Blue Door"),
    ("pilot", "Skyways"),
]
DIETS = ["vegetarian", "vegan", "pescatarian", "gluten-free"]
PLACES = ["Rome", "Kyoto", "Cairo", "Lima", "Quebec"]
QUESTIONS = {
    "city": "Where does the user live now?",
    "job": "Where does the user work now?",
    "diet": "What diet does the user follow now?",
    "partner": "Who is the user dating now?",
    "plan": "What trip does the user plan?",
}


@dataclass(frozen=True)
class Statement:
    """One user turn and the memory it states (None: it cancels ``attribute``)."""

    attribute: str
    turn: str
    memory: str | None


@dataclass
class User:
    user_id: str
    cohort: str  # good | sloppy | today
    sessions: list[list[Statement]] = field(default_factory=list)
    # attribute -> [(from, memory or None)], in time order: the ground truth
    timeline: dict[str, list[tuple[datetime, str | None]]] = field(default_factory=dict)

    def current(self, attribute: str) -> str | None:
        return self.timeline[attribute][-1][1]

    def at(self, attribute: str, when: datetime) -> str | None:
        valid = [m for start, m in self.timeline[attribute] if start <= when]
        return valid[-1] if valid else None

    def stale(self, attribute: str) -> list[str]:
        """Every value of the attribute that is no longer true."""
        cur = self.current(attribute)
        return [m for _, m in self.timeline[attribute] if m is not None and m != cur]


def make_user(user_id: str, cohort: str, rng: random.Random) -> User:
    u = User(user_id, cohort)
    tag = user_id.rsplit("-", 1)[-1]
    cities = rng.sample(CITIES, 3)
    jobs = rng.sample(JOBS, 2)
    diets = rng.sample(DIETS, 2)
    partners = [f"Alex-{tag}", f"Sam-{tag}"]
    place = rng.choice(PLACES)
    plan_day = DATES[1] + timedelta(days=(4 - DATES[1].weekday()) % 7 or 7)  # next Friday

    def said(i: int, attr: str, turn: str, memory: str | None) -> None:
        while len(u.sessions) <= i:
            u.sessions.append([])
        u.sessions[i].append(Statement(attr, turn, memory))
        u.timeline.setdefault(attr, []).append((DATES[i], memory))

    city = "The user lives in {}-" + tag
    said(0, "city", f"I live in {cities[0]}-{tag}.", city.format(cities[0]))
    said(
        0,
        "job",
        f"I work as a {jobs[0][0]} at {jobs[0][1]}-{tag}.",
        f"The user works as a {jobs[0][0]} at {jobs[0][1]}-{tag}",
    )
    said(
        0,
        "diet",
        f"Dr Lee-{tag} got me eating {diets[0]}: I'm {diets[0]} these days.",
        f"The user follows a {diets[0]} diet",
    )
    said(1, "partner", f"I'm dating {partners[0]}.", f"The user is dating {partners[0]}")
    said(
        1,
        "plan",
        f"We're flying to {place}-{tag} next Friday!",
        f"The user plans a trip to {place}-{tag} on {plan_day:%Y-%m-%d}",
    )
    said(1, "city", f"Big news: I moved to {cities[1]}-{tag}.", city.format(cities[1]))
    said(2, "plan", f"We cancelled the {place}-{tag} trip.", None)
    said(
        2,
        "job",
        f"I quit and now I'm a {jobs[1][0]} at {jobs[1][1]}-{tag}.",
        f"The user works as a {jobs[1][0]} at {jobs[1][1]}-{tag}",
    )
    said(
        2,
        "diet",
        f"Dr Lee-{tag} agreed I switch: I'm {diets[1]} now.",
        f"The user follows a {diets[1]} diet",
    )
    said(
        3,
        "partner",
        f"{partners[0]} and I split up; I'm with {partners[1]} now.",
        f"The user is dating {partners[1]}",
    )
    said(3, "city", f"We moved again, to {cities[2]}-{tag}.", city.format(cities[2]))
    said(3, "city", f"Still loving {cities[2]}-{tag}, by the way.", city.format(cities[2]))
    return u


class ScriptedModel:
    """The scripted extractor and reconciler of all bench users (a FakeLLM responder)."""

    def __init__(self, users: list[User], seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.by_turn: dict[str, tuple[User, Statement]] = {}
        self.attribute_of: dict[str, str] = {}  # memory text -> attribute
        for u in users:
            for session in u.sessions:
                for st in session:
                    self.by_turn[st.turn] = (u, st)
                    if st.memory:
                        self.attribute_of[st.memory] = st.attribute
        self.invented = 0
        self.answers: list[tuple[str, str]] = []  # (user prompt, answer) of extraction calls

    def __call__(self, kind: str, messages: list[dict[str, Any]]) -> str | None:
        if kind != "extract":
            return None
        prompt = str(messages[-1].get("content", ""))
        said = [self.by_turn[t] + (int(n),) for n, t in _user_turns(prompt) if t in self.by_turn]
        if not said:
            return json.dumps({"memories": [], "facts": []})
        cohort = said[0][0].cohort
        aliases = shown(messages)
        if cohort == "today" or (cohort == "sloppy" and self.rng.random() < 0.3):
            aliases = {}  # ADD everything
        items = [self._decide(st, n, aliases, cohort) for _, st, n in said]
        answer = json.dumps({"memories": [i for i in items if i], "facts": []})
        self.answers.append((prompt, answer))
        return answer

    def cohort_of(self, prompt: str) -> str:
        """The cohort of the user whose turns an extraction prompt holds."""
        for _, text in _user_turns(prompt):
            if text in self.by_turn:
                return self.by_turn[text][0].cohort
        return "other"

    def _decide(self, st: Statement, n: int, aliases: dict[str, str], cohort: str) -> dict | None:
        same = [a for a, text in aliases.items() if self.attribute_of.get(text) == st.attribute]
        target = same[0] if same else None
        if target and cohort == "sloppy" and self.rng.random() < 0.15:
            target, self.invented = f"m{90 + self.rng.randrange(9)}", self.invented + 1
        base = {"type": "fact", "importance": 0.8, "confidence": 0.9, "turns": [n]}
        if st.memory is None:  # a cancellation
            if target is None:
                return None
            return {**base, "event": "INVALIDATE", "target": target, "reason": "cancelled"}
        if target is None:
            return {**base, "content": st.memory, "event": "ADD"}
        if aliases.get(target) == st.memory:
            return {**base, "event": "NOOP", "target": target}
        return {
            **base,
            "content": st.memory,
            "event": "UPDATE",
            "target": target,
            "reason": f"{st.attribute} changed",
        }


_TURN = re.compile(r"^\[(\d+)\][^:\n]*?user: (.*)$", re.MULTILINE)


def _user_turns(prompt: str) -> list[tuple[str, str]]:
    """(turn index, text) of the user turns in an extraction prompt."""
    return [(m.group(1), m.group(2).strip()) for m in _TURN.finditer(prompt)]
