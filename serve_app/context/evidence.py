"""Evidence that a retrieved item is relevant to this message ("no noise").

Ranking signals such as a neighbour boost or an expansion bonus move an item up a
list that is cut anyway; they say nothing about whether the item helps with this
message ("Lives in Oslo near the fjord" ranked second for "green tea" on a neighbour
boost with cosine -0.001). So an item is admitted only on its own evidence:

- **similar**: its cosine to one of the message's parts is at least ``strong`` and
  within ``margin`` of the best candidate's for this message (what lies well below
  the best match is the topic's neighbourhood, not the answer: "Won the club's
  doubles tennis tournament" at 0.41 beside "Plays tennis at the club" at 0.54 for
  "How do I improve my tennis serve?"), or
- **shared words**: it shares at least ``min_shared`` content words with the message
  and its cosine is at least ``weak`` (dialogue turns and short notes match a
  question by their words, a name and a topic, more than by their embedding: LoCoMo
  evidence often sits at cosine 0.2-0.35). Words that only say *when* ("weekend",
  "Saturday", "last") are no evidence of what an item is about, so they are not
  counted (``ignore_time_words``).

Time words move the embedding too: "Suggest a dinner menu for guests on Saturday" is at
cosine 0.40 to "Plays tennis at the club on Wednesday evenings", and only 0.27 once
"on Saturday" is gone. With ``time_free`` the similarity path takes the lower of an
item's cosine to the message and to the message without its time words
(:func:`without_time`, searched in the same backend call), so a when-word can take
similarity away but never add it; the shared-words path keeps the plain cosine.

Every threshold is a setting (``MEMSERVE_CONTEXT_EVIDENCE_*``), calibrated on
loadtests/bench_context.py (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from models.views import view_text
from serve_app.context.expand import STOPWORDS
from serve_app.profile.classify import words
from serve_app.ranking import logistic as admission

STEM = 5  # "bakeries"/"bakery", "allergic"/"allergy": the same first five letters
_TIME_WORDS = """
    monday tuesday wednesday thursday friday saturday sunday weekend weekends weekday
    weekdays today tonight tomorrow yesterday morning mornings evening evenings night
    nights afternoon week weeks month months year years daily weekly monthly yearly
    last next ago january february march april june july august september october
    november december summer winter autumn
    """
TIME_WORDS = frozenset(_TIME_WORDS.split())
TIME_STEMS = frozenset(w[:STEM] for w in TIME_WORDS)


# Words that only lead into a time phrase ("on Saturday", "this weekend", "in January").
_LEADS = frozenset(
    (
        "this",
        "next",
        "last",
        "on",
        "in",
        "at",
        "every",
        "each",
        "by",
        "until",
        "since",
        "during",
        "for",
        "the",
        "a",
        "of",
    )
)
_PUNCT = "?.!,;:'\"()"


def is_time_word(token: str) -> bool:
    """A word that only says when ("Saturday", "tonight's", "January"): the whole word,
    not its stem ("Saturn", "sundae" say what)."""
    w = token.lower().strip(_PUNCT)
    return w.removesuffix("'s") in TIME_WORDS


def without_time(text: str) -> str | None:
    """``text`` without its time words and the words that lead into them ("on
    Saturday", "this weekend"); None when it has none, or nothing but them (then the
    text is about time and the plain cosine stands). A linear scan over the words."""
    kept = time_free_spans(text)
    return None if kept is None else view_text(text, kept)


def time_free_spans(text: str) -> tuple[tuple[int, int], ...] | None:
    """The character ranges of the words :func:`without_time` keeps (the time-free text
    as a view of ``text``, :mod:`models.views`), or None as there. Linear: each word is
    found from where the last one ended."""
    out: list[tuple[int, int]] = []
    dropped = False
    at = 0
    for tok in text.split():
        start = text.find(tok, at)
        at = start + len(tok)
        if is_time_word(tok):
            dropped = True
            while out and text[out[-1][0] : out[-1][1]].lower() in _LEADS:
                out.pop()
        else:
            out.append((start, at))
    if not dropped or not stems(view_text(text, tuple(out))):
        return None
    return tuple(out)


def stems(text: str) -> frozenset[str]:
    """Content-word stems of ``text`` (stop words and words under 3 letters dropped).
    A memory's stems are asked for on every context call that finds it: short texts'
    stems are kept (a bounded cache of a pure function; the same text, the same set)."""
    if len(text) <= _CACHED_CHARS:
        return _cached_stems(text)
    return _stems(text)


_CACHED_CHARS = 512


@lru_cache(maxsize=4096)
def _cached_stems(text: str) -> frozenset[str]:
    return _stems(text)


def _stems(text: str) -> frozenset[str]:
    return frozenset(w[:STEM] for w in words(text) if len(w) >= 3 and w not in STOPWORDS)


def _cosine(similarity: float | None) -> float:
    return float(similarity) if similarity is not None else -1.0


@dataclass(frozen=True)
class Evidence:
    """The admission rule's thresholds (see the module docstring). The dataclass
    defaults turn the margin, the shared-word count and the time words off (the rule
    before them); the calibrated values are ``ContextSettings``'s."""

    strong: float
    weak: float
    margin: float = 2.0  # >= 2: off (cosines lie in [-1, 1])
    min_shared: int = 1
    ignore_time_words: bool = False
    time_free: bool = False  # the similarity path takes min(cosine, cosine without time words)
    # Filling by rank: after the rule, up to ``fill`` more candidates, best ranked first,
    # whose judged cosine is at least ``floor`` (0: off). A need and its memory often
    # share no word and little cosine ("my car" and "I drive a Tesla Model 3": 0.2-0.35):
    # a hard gate fitted to one set shows one item where the budget holds ten.
    fill: int = 0
    floor: float = 1.0
    # Learned admission (loadtests/context_admission.py fits it on a calibration half):
    # weights of :func:`features` and a bias; a candidate the rule leaves out is admitted
    # when the logistic of the weighted sum reaches ``learned_min``. Empty: off.
    learned: tuple[float, ...] = ()
    learned_min: float = 0.5

    def shared(self, item_stems: frozenset[str], message: frozenset[str]) -> frozenset[str]:
        """The content-word stems that count as shared evidence."""
        both = item_stems & message
        return both - TIME_STEMS if self.ignore_time_words else both

    def similar(self, similarity: float | None, topic: float | None = None) -> float:
        """The cosine the similarity path judges: with ``time_free``, the lower of the
        plain one and ``topic`` (the cosine to the message without its time words;
        None: the message has none, so the plain cosine)."""
        sim = _cosine(similarity)
        if self.time_free and topic is not None:
            return min(sim, float(topic))
        return sim

    def why(
        self,
        similarity: float | None,
        item_stems: frozenset[str],
        message: frozenset[str],
        best: float | None = None,
        topic: float | None = None,
    ) -> str | None:
        """A reason to admit the item ("similar to the message (cosine 0.52)", "shares
        'bakery'..."), or None. ``best``: the best judged cosine among this message's
        candidates (None: the item's own, i.e. no margin); ``topic``: see
        :meth:`similar`."""
        sim = _cosine(similarity)
        judged = self.similar(similarity, topic)
        near_best = best is None or judged >= best - self.margin
        if judged >= self.strong and near_best:
            bare = " without its time words" if judged < sim else ""
            return f"similar to the message (cosine {judged:.2f}{bare})"
        shared = self.shared(item_stems, message)
        if len(shared) >= self.min_shared and sim >= self.weak:
            return f"shares {_quote(shared)} with the message (cosine {sim:.2f})"
        return None

    def admit(
        self,
        candidates: Sequence[tuple[float | None, frozenset[str]]],
        message: frozenset[str],
        topics: Sequence[float | None] | None = None,
    ) -> list[str | None]:
        """The reason (or None) for each (cosine, stems) candidate of one message;
        ``topics``: each one's cosine without time words (:meth:`similar`). The margin
        is taken against the best judged cosine among them. One pass, linear."""
        tops = list(topics) if topics is not None else [None] * len(candidates)
        judged = [self.similar(s, t) for (s, _), t in zip(candidates, tops, strict=True)]
        best = max(judged, default=-1.0)
        reasons = [
            self.why(s, st, message, best, t) for (s, st), t in zip(candidates, tops, strict=True)
        ]
        if self.learned:
            for i, ((sim, st), cosine) in enumerate(zip(candidates, judged, strict=True)):
                if reasons[i] is None:
                    shared = len(self.shared(st, message))
                    p = admission(self.learned, features(cosine, _cosine(sim), best, shared, i))
                    if p >= self.learned_min:
                        reasons[i] = f"likely needed (p {p:.2f}, cosine {cosine:.2f})"
        left = self.fill
        for i, cosine in enumerate(judged):  # candidates come best ranked first
            if left <= 0:
                break
            if reasons[i] is None and cosine >= self.floor:
                reasons[i] = f"among the message's best matches (cosine {cosine:.2f})"
                left -= 1
        return reasons

    def strict(self, similarity: float) -> Evidence:
        """The rule for a message the model cannot read (another language): the
        similarity path needs a cosine of at least ``similarity``, and nothing is filled
        by rank; shared words (names, places: the same in any language) still count."""
        return replace(self, strong=max(self.strong, similarity), fill=0, learned=())


FEATURES = ("cosine", "below_best", "shared_words", "rank", "time_words_gain")


def features(judged: float, plain: float, best: float, shared: int, rank: int) -> list[float]:
    """What the learned admission weighs, per candidate of one message (candidates come
    best ranked first): its judged cosine, how far it lies below the message's best, its
    shared content words (capped: a third says no more than a second), its rank (capped
    at 20) and what time words added to its cosine."""
    return [judged, judged - best, float(min(shared, 3)), min(rank, 20) / 10.0, plain - judged]


def _quote(shared: Iterable[str]) -> str:
    return ", ".join(f"'{s}'" for s in sorted(shared)[:3])
