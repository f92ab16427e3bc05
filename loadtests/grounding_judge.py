"""How bench_grounding judges a run: which values an item names, which of them are stale
on a session's day, what a dropped item was, and the per-arm and paired summaries."""

from __future__ import annotations

from typing import Any

from loadtests.knowledge_scenarios import DATES, QUESTIONS, User

# How the scenario's memory text names each attribute's value (knowledge_scenarios.make_user).
_VALUE = {
    "city": ("lives in ", None),
    "job": (" at ", None),
    "diet": ("follows a ", " diet"),
    "partner": ("dating ", None),
    "plan": ("trip to ", " on "),
}


def marker(attribute: str, memory: str | None) -> str | None:
    """The value an attribute's scenario memory names ("Paris-1234", "vegetarian")."""
    if memory is None:
        return None
    start, end = _VALUE[attribute]
    value = memory.split(start, 1)[1]
    return (value.split(end, 1)[0] if end else value).strip().lower()


def names(attribute: str, memory: str | None) -> set[str]:
    """Every way an item can name the value: the marker, and for a job also the role
    (a real model writes "job = chef" as often as the workplace)."""
    value = marker(attribute, memory)
    if value is None or memory is None:
        return set()
    if attribute == "job":
        return {value, memory.split("works as a ", 1)[1].split(" at ", 1)[0].lower()}
    return {value}


def stale_in(u: User, text: str, session: int) -> list[str]:
    """The attributes ``text`` states a no-longer-true value of, on session ``session``'s day."""
    day = DATES[session]
    low = text.lower()
    out = []
    for attribute, timeline in u.timeline.items():
        current = names(attribute, u.at(attribute, day))
        old = set().union(*(names(attribute, m) for start, m in timeline if start <= day))
        old -= current
        if attribute == "plan" and "cancel" in low:
            continue
        if any(o in low for o in old) and not any(c in low for c in current):
            out.append(attribute)
    return out


def new_in(u: User, session: int) -> dict[str, set[str]]:
    """The values (their names) that became true on session ``session``'s day, per
    attribute: what the user said that day and a good extraction writes."""
    day = DATES[session]
    out = {}
    for attribute, timeline in u.timeline.items():
        for start, memory in timeline:
            value = names(attribute, memory)
            if start == day and value:
                out[attribute] = value
    return out


def classify(u: User, text: str, session: int) -> str:
    """What a dropped item was: ``false_drop`` (it carried a value the user gave that day:
    a good update lost), ``stale_drop`` (an old value: what the check is for) or
    ``other`` (neither: a restated current value or an item outside the scenario)."""
    low = text.lower()
    if any(v in low for vs in new_in(u, session).values() for v in vs):
        return "false_drop"
    return "stale_drop" if stale_in(u, text, session) else "other"


def paired(on: list[dict[str, Any]], off: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Per user, without minus with the check: mean, its standard error, and how many
    users the check helped / left equal / hurt (for stale counts, lower is better)."""
    diffs = [b[metric] - a[metric] for a, b in zip(on, off, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n if n else 0.0
    sd = (sum((d - mean) ** 2 for d in diffs) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return {
        "diffs_off_minus_on": diffs,
        "mean": round(mean, 3),
        "se": round(sd / n**0.5, 3) if n else None,
        "off_higher": sum(d > 0 for d in diffs),
        "equal": sum(d == 0 for d in diffs),
        "on_higher": sum(d < 0 for d in diffs),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "stale_writes",
        "stale_live",
        "new",
        "new_written",
        "ungrounded",
        "failed_batches",
        "saved",
        "facts",
    )
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in keys}
    out["by_attribute"] = {
        a: {
            k: sum(r["by_attribute"][a][k] for r in rows)
            for k in ("stale_writes", "stale_live", "new", "new_written")
        }
        for a in QUESTIONS
    }
    drops = [d for r in rows for d in r["dropped"]]
    out["dropped"] = {
        c: sum(d["class"] == c for d in drops) for c in ("stale_drop", "false_drop", "other")
    }
    return out
