"""Query expansion by context prepend (seed Appendix C, option 1): no LLM, ~0 ms.

A vague follow-up is searched together with the key terms of the last few
user messages: "How much?" after "Planning a Hawaii vacation" becomes
"How much? planning hawaii vacation".
"""

from __future__ import annotations

from collections.abc import Sequence

import re2

from serve_app.context.prefilter import is_self_contained

_WORD = re2.compile(r"[A-Za-z0-9][A-Za-z0-9'_-]*")
_STOPWORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just let me more most my myself no nor not now of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    im ive id ill youre dont doesnt didnt cant wont isnt arent also really maybe think want
    like get got go going know sounds sound looks look yes no ok okay thanks please hi hello hey
    much many well good great nice sure one thing things something"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
HISTORY_USER_MESSAGES = 3
MAX_TERMS = 8


def key_terms(text: str, limit: int = MAX_TERMS) -> list[str]:
    """Content words of ``text`` in order of appearance, lower-cased, without repeats."""
    out: list[str] = []
    for word in _WORD.findall(text):
        w = word.lower().strip("'_-")
        if len(w) < 3 or w in STOPWORDS or w in out:
            continue
        out.append(w)
        if len(out) >= limit:
            break
    return out


def history_terms(history: Sequence[tuple[str, str]], limit: int = MAX_TERMS) -> list[str]:
    """Key terms of the last user messages, most recent first."""
    terms: list[str] = []
    seen_users = 0
    for role, content in reversed(history):
        if role != "user":
            continue
        for t in key_terms(content, limit):
            if t not in terms:
                terms.append(t)
        seen_users += 1
        if seen_users >= HISTORY_USER_MESSAGES or len(terms) >= limit:
            break
    return terms[:limit]


def expand_query(query: str, history: Sequence[tuple[str, str]]) -> str:
    """The text to search with: the query itself, or the query plus recent key terms."""
    if not history or is_self_contained(query):
        return query
    terms = [t for t in history_terms(history) if t not in query.lower()]
    return f"{query} {' '.join(terms)}" if terms else query
