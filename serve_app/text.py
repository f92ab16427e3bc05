"""Text helpers every layer shares: the normal form (dedup, validation, containment), the
token estimate of a budget, the markers of an injected memory block, the sentence split.

Runs on request text (every write, every context call, the junk guard), so every step
is linear in its input: C scans and single-character patterns, no pattern that
backtracks (see tests/serve_app/test_regex_safety.py).
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata

# A letter or digit: what ``[\W_]`` (edge punctuation) is not. One character, so a
# search is one pass; ``^[\W_]+|[\W_]+$`` instead rescanned a run of punctuation from
# each of its characters ("a" + "!" * 8000 + "a": 0.8 s).
_WORD_CHAR = re.compile(r"[^\W_]")
# NFKC can turn one character into up to 18 (U+FDFA) and casefold triples that again;
# ordinary text barely grows. The normal form is a key (dedup, containment), not text
# anyone reads, so past this factor (plus a little room for short texts) it keeps only
# its start: output stays O(input).
MAX_EXPANSION = 4
_ROOM = 64


def normalize(text: str) -> str:
    """Case-, width- and whitespace-insensitive form, edge punctuation dropped.

    Linear in ``len(text)`` and at most ``MAX_EXPANSION * len(text) + 64`` characters.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = " ".join(folded[: MAX_EXPANSION * len(text) + _ROOM].split())
    first = _WORD_CHAR.search(folded)
    if first is None:
        return ""
    last = _WORD_CHAR.search(folded[::-1])
    assert last is not None  # the same string, reversed, holds the same character
    return folded[first.start() : len(folded) - last.start()]


def dedupe_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()


# ---------------------------------------------------------------- entities

# Capitalised words that start sentences or questions without naming anything.
_NOT_NAMES_WORDS = """
    a about after all also an and any are as at be because before but by can could did do
    does for from had has have he her here hers him his how i if in is it its just let like me
    my no not now of oh ok okay on or our she so some than that the their them then there these
    they this those to too up us was we were what when where which while who whom whose why will
    with would yes you your yours yeah yep hey hi hello wow thanks thank sure well great cool
    nice good awesome amazing congrats congratulations sorry sounds really totally absolutely
    definitely glad love haha lol bye see take dear please maybe anyway alright right
    true"""
_NOT_NAMES = frozenset(_NOT_NAMES_WORDS.split())
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_POSSESSIVE = re.compile(r"['’]s?$")
_SENTENCE_END = frozenset('.!?:;"“(\n')


def entity_candidates(text: str) -> list[tuple[str, bool]]:
    """Proper-noun candidates of ``text``: (normalised name, seen only sentence-initially).

    A candidate is a run of capitalised words (``Caroline``, ``Becoming Nicole``,
    ``LGBTQ``) with possessives and leading function words dropped; each word of a
    multi-word run is a candidate too, so "Nicole" meets "Becoming Nicole". A word
    that only ever starts a sentence may be an ordinary word ("Painting is fun"):
    the flag lets the caller keep it only where the same name occurs mid-sentence
    elsewhere (see :class:`serve_app.retrieval.signals.EntityIndex`). No LLM, no model.
    """
    spans: list[tuple[list[str], bool]] = []
    run: list[str] = []
    run_initial = False
    last_end = 0
    for m in _WORD.finditer(text):
        word = _POSSESSIVE.sub("", m.group())
        gap = text[last_end : m.start()].rstrip()
        # What precedes the word, spaces skipped: the gap since the last word, else that
        # word (never a sentence end). Not text[:start]: a copy per word, words x length.
        initial = gap[-1] in _SENTENCE_END if gap else last_end == 0
        adjacent = bool(run) and not gap
        if word[:1].isupper() and (word.lower() not in _NOT_NAMES or adjacent):
            if not adjacent:
                if run:
                    spans.append((run, run_initial))
                run, run_initial = [], initial
            run.append(word)
        elif run:
            spans.append((run, run_initial))
            run = []
        last_end = m.end()
        if m.group() != word and run:  # a possessive ends the name
            spans.append((run, run_initial))
            run = []
    if run:
        spans.append((run, run_initial))
    out: dict[str, bool] = {}
    for words, initial in spans:
        names = [" ".join(words)] + (words if len(words) > 1 else [])
        for i, name in enumerate(names):
            key = name.casefold()
            if key in _NOT_NAMES or len(key) < 2:
                continue
            only_initial = initial and (len(words) == 1 or i == 1)
            out[key] = out.get(key, True) and only_initial
    return list(out.items())


def count_tokens(text: str) -> int:
    """Tokens of ``text`` for a budget, estimated instead of a tokenizer round trip.

    The embedder lives in another deployment, and the prompt goes to an unknown upstream
    model anyway. English text averages about 4 characters or 0.75 words per
    BPE/WordPiece token; taking the larger of ``chars / 4`` and ``words * 4 / 3``
    over-counts rather than under-counts, so a block that fits the estimate fits the
    real budget."""
    if not text:
        return 0
    return max(math.ceil(len(text) / 4), math.ceil(len(text.split()) * 4 / 3))


# The service injects a memory block into system prompts (POST /v1/context, the chat
# proxy). If that block were fed back to extraction, memories would feed on themselves:
# the context builder wraps its block, extraction strips it.
CONTEXT_OPEN = "<memserve-context>"
CONTEXT_CLOSE = "</memserve-context>"

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def wrap_context(text: str) -> str:
    """Mark an injected memory block so extraction can recognise and drop it."""
    return f"{CONTEXT_OPEN}\n{text}\n{CONTEXT_CLOSE}"


def strip_context(text: str) -> str:
    """Remove every injected block (an unclosed one runs to the end of the text).

    A scan with ``str.find``, linear: the pattern ``OPEN.*?CLOSE`` ran from every
    opening tag to the end of a text that never closes them (84 KB: 7 s).
    """
    kept: list[str] = []
    pos = 0
    while (start := text.find(CONTEXT_OPEN, pos)) != -1:
        kept.append(text[pos:start])
        end = text.find(CONTEXT_CLOSE, start + len(CONTEXT_OPEN))
        pos = len(text) if end == -1 else end + len(CONTEXT_CLOSE)
    kept.append(text[pos:])
    return " ".join(kept).strip()


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]
