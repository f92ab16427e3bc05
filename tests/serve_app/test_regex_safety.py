"""Regexes on request text run in linear time: RE2 (``import re2``), or a stdlib ``re``
pattern someone reviewed and listed below with the reason it cannot backtrack.

Python's ``re`` backtracks: ``^[\\W_]+|[\\W_]+$`` on a run of punctuation, or one
pattern for "a JSON string with its escapes" on an unclosed string, cost O(n^2) per
request (issue 28). RE2 never backtracks, so it is the default; the stdlib is kept only
where RE2 differs (its ``\\w`` is ASCII, it reads bytes as UTF-8, it has no lookbehind)
or its per-match overhead matters. This test walks the package's source: a stdlib
pattern that is not on the list, or is not a literal the list can name, fails it, and
so does a listed one that ``regexploit`` finds exponential or polynomial backtracking in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from regexploit.ast.sre import SreOpParser
from regexploit.redos import find

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("serve_app", "deployments")
CALLS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}

# (file, pattern) -> why it runs in linear time on any input. Keep the reasons honest:
# a pattern is safe when no character can be consumed by two quantified parts at once
# and a failed attempt costs O(1), or each failed scan is paid once for the whole text.
REVIEWED: dict[tuple[str, str | bytes], str] = {
    ("serve_app/api/input_guard.py", rb"\\."): "fixed length (two bytes)",
    ("serve_app/api/input_guard.py", rb'"[^"]*"'): (
        "a match is consumed; a failed scan from a quote means no quote follows, so it "
        "happens once per text (bytes: RE2 would read them as UTF-8)"
    ),
    ("serve_app/api/input_guard.py", rb"\xed[\xa0-\xbf]"): "fixed length (two bytes)",
    ("serve_app/api/input_guard.py", rb"\\u0000"): "a literal",
    ("serve_app/api/input_guard.py", rb"\\ud([89ab]|[c-f])[0-9a-f]{2}"): "fixed length",
    ("serve_app/api/input_guard.py", "[\x00\ud800-\udfff]"): (
        "one character (RE2 cannot hold surrogates)"
    ),
    ("serve_app/text.py", r"[^\W_]"): "one character (Unicode classes: RE2's are ASCII)",
    ("serve_app/text.py", r"[^\W\d_][\w'’-]*"): (
        "a letter, then one greedy run of one class with nothing after it: a match "
        "consumes the run, a failure costs O(1) (Unicode classes)"
    ),
    ("serve_app/text.py", r"['’]s?$"): "at most two characters, then the end (one word)",
    ("serve_app/context/fuse.py", r"\w+"): "one greedy run, nothing after it (Unicode)",
    ("serve_app/testing/cross_encoder.py", r"\w+"): (
        "one greedy run, nothing after it, over the test model's own constant word list"
    ),
    ("serve_app/text.py", r"(?<=[.!?])\s+|\n+"): (
        "a one-character lookbehind, then one greedy run with nothing after it; the "
        "alternatives' runs are consumed by a match (RE2 has no lookbehind)"
    ),
    ("serve_app/extraction/parser.py", r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"): "one character",
    ("serve_app/extraction/parser.py", r"[^a-z0-9]+"): "one greedy run, nothing after it",
    ("serve_app/retrieval/lexical.py", r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?"): (
        "reads PostgreSQL's tsvector output, where every lexeme is quoted and closed; the "
        "alternatives start with different characters, so a match never backtracks "
        "(hundreds of thousands of matches per cache load: RE2's per-match cost)"
    ),
}


def stdlib_uses(source: str, path: str) -> list[tuple[str, int, str | bytes | None]]:
    """(file, line, pattern) of each stdlib ``re`` call; pattern None: not a literal
    (or imported as ``from re import ...``), which the review cannot name."""
    tree = ast.parse(source, path)
    names: set[str] = set()
    uses: list[tuple[str, int, str | bytes | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name == "re"}
        elif isinstance(node, ast.ImportFrom) and node.module == "re":
            uses += [(path, node.lineno, None) for a in node.names if a.name in CALLS]
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names
            and node.func.attr in CALLS
        ):
            continue
        arg = (
            node.args[0]
            if node.args
            else next((k.value for k in node.keywords if k.arg == "pattern"), None)
        )
        try:
            pattern = ast.literal_eval(arg) if arg is not None else None
        except ValueError:
            pattern = None
        uses.append((path, node.lineno, pattern if isinstance(pattern, str | bytes) else None))
    return uses


def redos(pattern: str | bytes) -> list:
    """regexploit's findings: exponential or polynomial backtracking in ``pattern``."""
    text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
    return list(find(SreOpParser().parse_sre(text)))


def problems(uses, reviewed) -> list[str]:
    out = []
    for path, line, pattern in uses:
        if pattern is None:
            out.append(f"{path}:{line}: a stdlib regex the review cannot name (use re2)")
        elif (path, pattern) not in reviewed:
            out.append(f"{path}:{line}: {pattern!r} is neither RE2 nor reviewed")
        elif found := redos(pattern):
            out.append(f"{path}:{line}: {pattern!r} backtracks: {found}")
    return out


def package_uses() -> list[tuple[str, int, str | bytes | None]]:
    uses = []
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            rel = file.relative_to(ROOT).as_posix()
            uses += stdlib_uses(file.read_text(), rel)
    return uses


def test_every_stdlib_regex_of_the_package_is_reviewed():
    uses = package_uses()
    assert problems(uses, REVIEWED) == []
    stale = set(REVIEWED) - {(path, pattern) for path, _, pattern in uses}
    assert not stale, f"reviewed patterns no longer in the code: {stale}"


def test_validation_patterns_stay_on_pydantics_linear_engine():
    """``Field(pattern=...)`` runs on pydantic-core's Rust regex (linear) unless a model
    asks for Python's engine."""
    for package in PACKAGES:
        for file in (ROOT / package).rglob("*.py"):
            assert "python-re" not in file.read_text(), file


@pytest.mark.parametrize(
    "source",
    [
        'import re\nX = re.compile(r"^[\\W_]+|[\\W_]+$")',  # the normalize pattern of #28
        'import re as r\nr.sub(r"(a+)+$", "", text)',
        "import re\nre.search(PATTERN + suffix, text)",  # not a literal
        "from re import compile\nX = compile('a')",
    ],
)
def test_the_check_refuses_an_unreviewed_pattern(source):
    assert len(problems(stdlib_uses(source, "x.py"), REVIEWED)) == 1


def test_the_check_refuses_a_reviewed_pattern_that_backtracks():
    source = 'import re\nX = re.compile(r"(\\w+\\s?)+$")'
    [problem] = problems(stdlib_uses(source, "x.py"), {("x.py", r"(\w+\s?)+$"): "wrong"})
    assert "backtracks" in problem


def test_re2_patterns_need_no_review():
    source = 'import re2\nX = re2.compile(r"^[\\W_]+|[\\W_]+$")\nimport re\nre.escape("x")'
    assert problems(stdlib_uses(source, "x.py"), {}) == []
