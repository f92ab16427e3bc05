"""A message read part by part: sentences, questions and clauses.

"What city am I in? Any good bakeries around?" asks two things; searched as one text
the second drowns the first. Each part is searched on its own (all parts in one
backend call, so one encoder batch) and the results are fused by their best part.
The whole message stays a part too, so what it matched before still matches. A dot
after a common abbreviation ("Dr. Smith", "e.g.", "9 a.m. tomorrow") or an initial does
not end a sentence; "What do Anna and Ben like?" is searched for each of them too.

A plain scan, linear in the message: no regular expressions on request text.
"""

from __future__ import annotations

from serve_app.context.expand import key_terms
from serve_app.context.prefilter import is_greeting

_ENDS = ".?!;\n"
# Abbreviations a dot never ends a sentence after: titles before a name ("Dr. Smith"),
# "e.g." and "i.e." before what they introduce, "St. Louis".
NEVER_END = frozenset(
    (
        "dr",
        "mr",
        "mrs",
        "ms",
        "prof",
        "st",
        "mt",
        "jr",
        "sr",
        "vs",
        "e.g",
        "i.e",
        "cf",
        "approx",
        "dept",
        "fig",
    )
)
# Abbreviations that end a sentence only before a capital ("... pears, etc. Then I"),
# not inside one ("at 9 a.m. tomorrow").
MAYBE_END = frozenset(("etc", "a.m", "p.m", "inc", "ltd", "co", "al"))
# Words that start a new intent inside a sentence ("..., and plan a trip").
_JOINERS = frozenset({"and", "but", "also", "plus", "then"})
MIN_PART_WORDS = 3  # a clause shorter than this stays with its neighbour
_OPENERS = "\"'([{"
_TRAIL = ",.?!;:"


def _ends_sentence(text: str, i: int) -> bool:
    """Whether the dot at ``i`` ends a sentence: it is followed by a space (not "3.5",
    "example.com") and does not close an abbreviation or an initial ("J. K. Rowling").
    Looks back over the dot's own word only, so a scan of the text stays linear."""
    n = len(text)
    if i + 1 < n and not text[i + 1].isspace():
        return False
    start = i
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:i].lstrip(_OPENERS).lower()
    if word in NEVER_END or (len(word) == 1 and word.isalpha()):
        return False
    if word in MAYBE_END:
        j = i + 1
        while j < n and text[j].isspace():
            j += 1
        return j >= n or text[j].isupper()
    return True


def sentences(text: str) -> list[str]:
    """Split at . ? ! ; and new lines; a dot inside a number or a word, after a common
    abbreviation or an initial, does not end a sentence (:func:`_ends_sentence`)."""
    out: list[str] = []
    start = 0
    for i, ch in enumerate(text):
        if ch not in _ENDS or (ch == "." and not _ends_sentence(text, i)):
            continue
        part = text[start : i + 1].strip()
        if part:
            out.append(part)
        start = i + 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def clauses(sentence: str) -> list[str]:
    """Split a sentence before a joiner ("and", "but", "also", ...) that follows a comma,
    or before "and"/"but" when both sides have at least ``MIN_PART_WORDS`` words."""
    words = sentence.split()
    out: list[list[str]] = [[]]
    for i, w in enumerate(words):
        bare = w.lower().strip(",")
        after_comma = i > 0 and words[i - 1].endswith(",")
        rest = len(words) - i - 1
        if (
            bare in _JOINERS
            and len(out[-1]) >= MIN_PART_WORDS
            and rest >= MIN_PART_WORDS
            and (after_comma or bare in ("and", "but"))
        ):
            out.append([])
            continue
        out[-1].append(w)
    return [" ".join(c).strip(" ,") for c in out if c]


def _is_name(word: str) -> bool:
    """A capitalised word that can be a person's name ("Anna", "Ben's"), not "I"."""
    w = word.strip(_TRAIL).removesuffix("'s").removesuffix("\u2019s")
    return len(w) > 1 and w[0].isupper() and w[1:].isalpha() and not w.isupper()


def per_person(clause: str, limit: int = 6) -> list[str]:
    """One text per person of a clause that asks about several together: "What do Anna
    and Ben like?" -> "What do Anna like?", "What do Ben like?", so each one's memories
    are searched for (names joined by "and"/"or"/"&" or commas; the first such list in
    the clause). Empty when the clause names fewer than two people together; at most
    ``limit`` texts, so the output stays linear in the clause."""
    words = clause.split()
    i = 0
    while i < len(words):
        names: list[int] = []
        j = i
        while j < len(words) and _is_name(words[j]):
            names.append(j)
            last = words[j]
            if last.endswith(","):
                j += 1
            elif j + 1 < len(words) and words[j + 1].lower() in ("and", "or", "&"):
                j += 2
            else:
                break
            if j < len(words) and words[j].lower() in ("and", "or", "&"):
                j += 1  # "Anna, Ben, and Carla"
        if len(names) >= 2:
            head, tail = words[: names[0]], words[names[-1] + 1 :]
            if head and head[-1].lower() in ("both", "either"):
                head = head[:-1]  # "have both Jean and John visited" -> "have Jean visited"
            end = words[names[-1]]
            trail = end[len(end.rstrip(_TRAIL)) :]  # the "?" of "... Anna and Ben?"
            return [
                " ".join([*head, words[k].rstrip(_TRAIL) + trail, *tail]) for k in names[:limit]
            ]
        i = max(j, i + 1)
    return []


def split_parts(message: str, max_parts: int) -> list[str]:
    """The parts to search: the message, then its sentences/clauses (and, for a clause
    about several people, one text per person) that carry content words (greetings and
    fillers dropped), without repeats, at most ``max_parts``."""
    parts = [message]
    pieces = [c for s in sentences(message) for c in clauses(s)]
    pieces = [p for c in pieces for p in (c, *per_person(c, max_parts))]
    if len(pieces) < 2:
        return parts
    for p in pieces:
        if len(parts) >= max_parts:
            break
        # key_terms first: it rejects the pieces without content words (a long run of
        # "?!" or "a. b.") at the least cost per piece
        if p not in parts and key_terms(p, limit=1) and not is_greeting(p):
            parts.append(p)
    return parts


def read_message(query: str, text: str, split: bool, max_parts: int) -> tuple[bool, list[str]]:
    """(small talk?, the texts to search: ``text``, the expanded query, first, then the
    parts of ``query`` when ``split``); no texts for small talk."""
    # "How much?" after "planning a Hawaii trip" is a question, not small talk.
    small = is_greeting(query) or (is_small_talk(query) and text == query)
    if small:
        return True, []
    parts = split_parts(query, max_parts) if split else [query]
    return False, [text, *parts[1:]]


# Words of pleasantries: a message made only of these (beyond stop words) is small talk.
SMALL_TALK = frozenset(
    [
        "thanks",
        "thank",
        "thx",
        "helps",
        "helped",
        "helpful",
        "lot",
        "lots",
        "great",
        "awesome",
        "cool",
        "haha",
        "hahaha",
        "lol",
        "lmao",
        "nice",
        "perfect",
        "appreciate",
        "appreciated",
        "wow",
        "amazing",
        "fine",
        "morning",
        "evening",
        "afternoon",
        "night",
        "today",
        "weather",
        "isn't",
        "it's",
        "that's",
        "how's",
        "doing",
        "day",
        "cheers",
        "bye",
        "later",
        "yo",
        "hey",
        "hmm",
        "hello",
        "hi",
        "ok",
        "okay",
        "sure",
        "yeah",
        "yep",
        "good",
        "glad",
        "happy",
        "sounds",
    ]
)


def is_small_talk(message: str) -> bool:
    """A greeting, a thanks, or a message whose content words are all pleasantries."""
    if is_greeting(message):
        return True
    return all(
        all(w in SMALL_TALK for w in key_terms(s, limit=64)) or is_greeting(s)
        for s in sentences(message) or [message]
    )
