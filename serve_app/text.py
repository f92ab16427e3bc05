"""Text normalisation shared by dedup and validation."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = re.compile(r"^[\W_]+|[\W_]+$")


def normalize(text: str) -> str:
    """Case-, width- and whitespace-insensitive form, trailing punctuation dropped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _SPACE.sub(" ", text).strip()
    return _EDGE_PUNCT.sub("", text)


def dedupe_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()
