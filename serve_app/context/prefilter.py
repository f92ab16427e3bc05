"""Decide whether a message needs memory at all (seed design §5, ``isGreeting``).

Greetings, thanks, goodbyes and bare acknowledgements carry no information a
memory could help with, so the context builder skips the search for them (the
user's structured facts are still returned: they are a cheap lookup).
"""

from __future__ import annotations

import re2  # RE2: linear time on every query

_GREETINGS = [
    re2.compile(p)
    for p in (
        r"^(hi|hello|hey|howdy|hiya|yo|good (morning|afternoon|evening))( there)?[\s!.?,]*$",
        r"^(thanks|thank you|thx|ty|cheers)( so much| a lot)?[\s!.?,]*$",
        r"^(bye|goodbye|see you|see ya|good night|later)[\s!.?,]*$",
        r"^(ok|okay|k|sure|yes|yep|yeah|no|nope|cool|great|nice|got it|alright)[\s!.?,]*$",
    )
]

# Follow-ups that only make sense with the conversation before them (seed Appendix C).
_VAGUE = [
    re2.compile("(?i)" + p)
    for p in (
        r"^how much\??$",
        r"^what about\b",
        r"^and (that|this|the)\b",
        r"^(this|that) one\b",
        r"^(why|how|when|where)\??$",
        r"^(what|which) (one|else)\??$",
        r"\b(it|that|this|those|them)\??$",
    )
]
SELF_CONTAINED_MIN_CHARS = 20
# The longest a greeting above can be without its trailing punctuation ("good afternoon
# there"): a longer message is no greeting, without running the four patterns (a
# context call asks this of every sentence and part).
_GREETING_MAX_CHARS = 24


def is_greeting(query: str) -> bool:
    """True for a message that needs no memory (hello, thanks, bye, ok)."""
    lower = " ".join(query.lower().split())
    if len(lower.rstrip(" !.?,")) > _GREETING_MAX_CHARS:
        return False
    return any(p.match(lower) for p in _GREETINGS)


def is_self_contained(query: str) -> bool:
    """False for a vague follow-up ("how much?", "what about it?") or a very short message."""
    text = query.strip()
    if any(p.search(text) for p in _VAGUE):
        return False
    return len(text) > SELF_CONTAINED_MIN_CHARS
