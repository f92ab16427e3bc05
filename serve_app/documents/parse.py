"""Documents to text with structure: plain text, Markdown, HTML and PDF.

Every parser returns a :class:`Parsed`: the document's text and its blocks (paragraphs,
list items, table rows, pages), each a character span of that text with the heading
path it sits under, so the chunker can cut at paragraph and section boundaries and a
chunk can cite where it came from. All scans are linear in the input (no regex on
document text); PDF goes through pypdf, HTML through the standard library's
``html.parser``. These are CPU work: the service runs them in a worker thread.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Block", "DocumentRefused", "Limits", "Parsed", "parse"]


class DocumentRefused(Exception):
    """The document cannot be ingested: ``status`` 413 (over a bound) or 422 (unreadable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    max_chars: int = 4_000_000
    max_pdf_pages: int = 1000


@dataclass(frozen=True)
class Block:
    start: int
    end: int
    heading_path: tuple[str, ...] = ()


@dataclass
class Parsed:
    text: str
    blocks: list[Block] = field(default_factory=list)
    title: str | None = None  # the document's own title (HTML <title>, first H1), if any


class _Builder:
    """Appends blocks to one text, each separated by a blank line; bounded by chars."""

    def __init__(self, limits: Limits) -> None:
        self.parts: list[str] = []
        self.blocks: list[Block] = []
        self.size = 0
        self.limits = limits

    def add(self, text: str, path: tuple[str, ...]) -> None:
        text = text.strip()
        if not text:
            return
        if self.parts:
            self.parts.append("\n\n")
            self.size += 2
        start = self.size
        self.parts.append(text)
        self.size += len(text)
        if self.size > self.limits.max_chars:
            raise DocumentRefused(
                413, f"the document's text is over {self.limits.max_chars} characters"
            )
        self.blocks.append(Block(start, self.size, path))

    def done(self, title: str | None = None) -> Parsed:
        return Parsed("".join(self.parts), self.blocks, title)


def _check_size(text: str, limits: Limits) -> None:
    if len(text) > limits.max_chars:
        raise DocumentRefused(413, f"the document's text is over {limits.max_chars} characters")
    if "\x00" in text:
        raise DocumentRefused(422, "the document's text contains NUL characters")


def _paragraphs(text: str, base: int, path: tuple[str, ...], out: list[Block]) -> None:
    """Blocks of ``text`` (at offset ``base`` of the document) split at blank lines."""
    start = None
    pos = 0
    for line in text.splitlines(keepends=True):
        if line.strip():
            if start is None:
                start = pos
        elif start is not None:
            out.append(Block(base + start, base + pos, path))
            start = None
        pos += len(line)
    if start is not None:
        out.append(Block(base + start, base + pos, path))


def parse_plain(text: str, limits: Limits) -> Parsed:
    _check_size(text, limits)
    blocks: list[Block] = []
    _paragraphs(text, 0, (), blocks)
    return Parsed(text, blocks)


def _atx_heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a Markdown ATX heading line ('## Title ##'), else None."""
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return None
    level = 0
    while level < len(stripped) and stripped[level] == "#":
        level += 1
    if not 1 <= level <= 6:
        return None
    rest = stripped[level:]
    if rest and rest[0] not in " \t\r\n":
        return None
    title = rest.strip().rstrip("#").strip()
    return level, title


def parse_markdown(text: str, limits: Limits) -> Parsed:
    """Sections by ATX headings (a linear scan; fenced code is never read as a heading),
    paragraphs by blank lines. Offsets point into the Markdown source itself."""
    _check_size(text, limits)
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    seg_start = 0  # start of the current run of non-heading lines
    pos = 0
    title = None

    def flush(end: int) -> None:
        _paragraphs(text[seg_start:end], seg_start, tuple(t for _, t in stack), blocks)

    for line in text.splitlines(keepends=True):
        stripped = line.lstrip(" ")
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            fence = None if fence == marker else (fence or marker)
        elif fence is None:
            heading = _atx_heading(line)
            if heading is not None:
                flush(pos)
                level, name = heading
                while stack and stack[-1][0] >= level:
                    stack.pop()
                if name:
                    stack.append((level, name[:200]))
                    title = title or (name if level == 1 else None)
                seg_start = pos + len(line)
        pos += len(line)
    flush(pos)
    return Parsed(text, blocks, title)


_BLOCK_TAGS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "dd",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "tbody",
        "td",
        "th",
        "thead",
        "tr",
        "ul",
    ]
)
_SKIP_TAGS = frozenset({"script", "style", "head", "template", "noscript", "svg", "iframe"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


class _HtmlText(HTMLParser):
    """Text of an HTML page as blocks under its h1..h6 headings; scripts and styles dropped."""

    def __init__(self, limits: Limits) -> None:
        super().__init__(convert_charrefs=True)
        self.out = _Builder(limits)
        self.buf: list[str] = []
        self.skip = 0
        self.stack: list[tuple[int, str]] = []
        self.heading: int | None = None
        self.in_title = False
        self.title_parts: list[str] = []
        self.first_h1: str | None = None

    def _flush(self) -> None:
        text = " ".join("".join(self.buf).split())
        self.buf = []
        if self.heading is not None:
            level = self.heading
            self.heading = None
            while self.stack and self.stack[-1][0] >= level:
                self.stack.pop()
            if text:
                self.stack.append((level, text[:200]))
                if level == 1 and self.first_h1 is None:
                    self.first_h1 = text[:200]
            return
        self.out.add(text, tuple(t for _, t in self.stack))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag in _SKIP_TAGS:
            self.skip += 1
        elif tag in _BLOCK_TAGS and not self.skip:
            self._flush()
            if tag in _HEADINGS:
                self.heading = _HEADINGS[tag]

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag in _BLOCK_TAGS and not self.skip:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_parts.append(data)
        elif not self.skip:
            self.buf.append(data)


def parse_html(text: str, limits: Limits) -> Parsed:
    _check_size(text, limits)
    parser = _HtmlText(limits)
    parser.feed(text)
    parser.close()
    parser._flush()
    title = " ".join("".join(parser.title_parts).split()) or None
    return parser.out.done(title or parser.first_h1)


def _declared_pages(reader: object) -> int:
    """The page count the PDF's root page tree declares (``/Root /Pages /Count``), read
    without walking the tree: a 2 KB file declaring 2^20 pages cost 4 s of CPU in
    ``len(reader.pages)`` before pypdf's own limit stopped it. 0 where it is missing
    or not a number (the walk then counts, bounded by pypdf)."""
    try:
        count = reader.trailer["/Root"]["/Pages"].get("/Count", 0)  # type: ignore[attr-defined]
        return int(count) if isinstance(count, int) else 0
    except Exception:  # a broken root is reported by the walk that follows
        return 0


def parse_pdf(data: bytes, limits: Limits) -> Parsed:
    """Each page's text, paragraphs by blank lines, under the heading path ``Page n``.

    A file that is not a readable PDF, or one that needs a password, is a 422; more
    pages than ``max_pdf_pages`` a 413 (checked before any page is read)."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                unlocked = reader.decrypt("")
            except (PyPdfError, NotImplementedError, ValueError):
                unlocked = 0
            if not unlocked:
                raise DocumentRefused(422, "the PDF is encrypted (it needs a password)")
        declared = _declared_pages(reader)
        if declared > limits.max_pdf_pages:  # before len(): that walks the whole page tree
            raise DocumentRefused(
                413, f"the PDF declares {declared} pages; at most {limits.max_pdf_pages}"
            )
        pages = len(reader.pages)
    except DocumentRefused:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise DocumentRefused(
            422, f"the file is not a readable PDF ({type(exc).__name__})"
        ) from None
    if pages > limits.max_pdf_pages:
        raise DocumentRefused(413, f"the PDF has {pages} pages; at most {limits.max_pdf_pages}")
    out = _Builder(limits)
    for n in range(pages):
        try:
            page_text = reader.pages[n].extract_text() or ""
        except DocumentRefused:
            raise
        except Exception as exc:  # pypdf raises many types on a broken page stream
            raise DocumentRefused(
                422, f"page {n + 1} of the PDF is unreadable ({type(exc).__name__})"
            ) from None
        page_text = page_text.replace("\x00", "")
        blocks: list[Block] = []
        _paragraphs(page_text, 0, (), blocks)
        for b in blocks:
            out.add(page_text[b.start : b.end], (f"Page {n + 1}",))
    title = None
    try:
        meta = reader.metadata
        title = str(meta.title).strip() or None if meta is not None and meta.title else None
    except Exception:  # metadata is optional and often broken; the text is what matters
        title = None
    return out.done(title)


def decode_text(data: bytes) -> str:
    """A text upload's characters: UTF-8 (a BOM is dropped), else a 422."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentRefused(422, "a text upload must be UTF-8") from None


def parse(content_type: str, *, text: str | None, data: bytes | None, limits: Limits) -> Parsed:
    """The parser for ``content_type`` over ``text`` or ``data``; an empty result is a 422."""
    if content_type == "application/pdf":
        if data is None:
            raise DocumentRefused(422, "a PDF is sent as a file upload")
        parsed = parse_pdf(data, limits)
    else:
        body = text if text is not None else decode_text(data or b"")
        if content_type == "text/markdown":
            parsed = parse_markdown(body, limits)
        elif content_type == "text/html":
            parsed = parse_html(body, limits)
        else:
            parsed = parse_plain(body, limits)
    if not parsed.blocks:
        raise DocumentRefused(422, "the document has no text")
    return parsed
