"""Documents to text with structure: plain text, Markdown, HTML and PDF.

Every parser returns a :class:`Parsed`: the document's text and its blocks (paragraphs,
list items, table rows, pages), each a character span of that text with the heading
path it sits under, so the chunker can cut at paragraph and section boundaries and a
chunk can cite where it came from. All scans are linear in the input (no regex on
document text); PDF goes through pypdf, HTML through lexbor (``selectolax``: the
standard library's ``html.parser`` is quadratic on unclosed attributes, ``'<a b="' *
20000`` took 38 s). These are CPU work: the service runs plain text and Markdown in a
worker thread, PDF and HTML in a child process with CPU and memory limits
(serve_app/documents/sandbox.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

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
    max_pdf_objects: int = 200_000
    max_decoded_bytes: int = 128 * 1024 * 1024
    max_html_depth: int = 512


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
    if not _encodable(text):
        raise DocumentRefused(422, "the document's text contains unpaired surrogate characters")


def _encodable(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form (no unpaired surrogate: PostgreSQL and the
    tokenizer take UTF-8 only). One C pass."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _valid_text(text: str) -> str:
    """``text`` with unpaired surrogates as U+FFFD: a PDF font's ToUnicode map may name
    ``<D800>`` for a glyph, and one such glyph must not make the whole file unstorable."""
    if _encodable(text):
        return text
    # UTF-16 holds a lone surrogate as one unit, which its decoder replaces by one U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


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


class _HtmlText:
    """Text of an HTML page as blocks under its h1..h6 headings; scripts and styles dropped.

    Fed start tags, end tags and text in document order by :func:`parse_html`'s walk of
    the DOM lexbor built."""

    def __init__(self, limits: Limits) -> None:
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

    def handle_starttag(self, tag: str) -> None:
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


# Elements that never hold others, and those a sibling start tag closes (``<li>`` ends
# the open ``<li>``): neither deepens the tree, so the depth scan does not count them.
_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
        "li",
        "p",
        "dt",
        "dd",
        "tr",
        "td",
        "th",
        "option",
        "optgroup",
        "thead",
        "tbody",
        "tfoot",
        "colgroup",
        "caption",
        "rb",
        "rt",
        "rp",
        "html",
        "head",
        "body",
    ]
)
_RAW_TEXT = ("script", "style", "textarea", "xmp", "plaintext", "noembed", "noframes")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def _tag_name(text: str, pos: int) -> str:
    """The tag name starting at ``pos`` (at most 16 characters are looked at)."""
    end = pos
    while end < len(text) and end - pos < 16 and text[end] in _NAME_CHARS:
        end += 1
    return text[pos:end].lower()


def _check_depth(text: str, limits: Limits) -> None:
    """413 when elements open deeper than ``max_html_depth``. An HTML5 tree builder
    looks through the stack of open elements at every block start tag (is a ``<p>`` in
    scope to close?), so ``'<div>' * n`` costs n^2 (lexbor: 20,000 of them 1 s,
    ``'<ul><li>' * 20000`` 6 s). One pass over the tags: per name, start tags less end
    tags (an end tag of another name closes nothing here), comments and raw text
    (scripts, styles) skipped. It over-counts only elements a page leaves open."""
    open_by_name: dict[str, int] = {}
    depth = 0
    pos = text.find("<")
    while pos != -1:
        if text.startswith("<!--", pos):
            end = text.find("-->", pos + 4)
            pos = text.find("<", end + 3) if end != -1 else -1
            continue
        closing = text.startswith("</", pos)
        name = _tag_name(text, pos + 2 if closing else pos + 1)
        if name and name not in _VOID:
            if closing:
                if open_by_name.get(name):
                    open_by_name[name] -= 1
                    depth -= 1
            else:
                gt = text.find(">", pos)
                if gt == -1 or text[gt - 1] != "/":
                    open_by_name[name] = open_by_name.get(name, 0) + 1
                    depth += 1
                    if depth > limits.max_html_depth:
                        raise DocumentRefused(
                            413, f"the HTML nests elements over {limits.max_html_depth} deep"
                        )
                if name in _RAW_TEXT:  # its text is not markup, up to its end tag
                    pos = _raw_end(text, name, pos + 1)
                    continue
        pos = text.find("<", pos + 1)


def _raw_end(text: str, name: str, pos: int) -> int:
    """Where the end tag of raw-text element ``name`` starts at or after ``pos`` (any
    case), else -1; each ``</`` is looked at once."""
    pos = text.find("</", pos)
    while pos != -1 and text[pos + 2 : pos + 2 + len(name)].lower() != name:
        pos = text.find("</", pos + 2)
    return pos


def parse_html(text: str, limits: Limits) -> Parsed:
    """lexbor builds the DOM (linear, entities decoded, broken markup repaired as a
    browser would); an explicit stack walks it, so a page nested 10^5 deep needs no
    recursion."""
    from selectolax.lexbor import LexborHTMLParser

    _check_size(text, limits)
    _check_depth(text, limits)
    parser = _HtmlText(limits)
    root = LexborHTMLParser(text).root
    # Document order from lexbor's own walk; an element ends where the next node is not
    # inside it (its parent is not the innermost open element).
    open_elements: list[tuple[int, str]] = []
    for node in root.traverse(include_text=True) if root is not None else ():
        parent = node.parent
        parent_id = parent.mem_id if parent is not None else None
        while open_elements and open_elements[-1][0] != parent_id:
            parser.handle_endtag(open_elements.pop()[1])
        tag = node.tag
        if tag == "-text":
            parser.handle_data(node.text_content or "")
        elif not tag.startswith("-"):  # comments, doctype: no text
            parser.handle_starttag(tag)
            open_elements.append((node.mem_id, tag))
    while open_elements:
        parser.handle_endtag(open_elements.pop()[1])
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


def _objects(reader: Any) -> int:
    """Cross-reference entries of the file (objects it may ask a reader to resolve)."""
    return sum(len(v) for v in reader.xref.values()) + len(reader.xref_objStm)


def _content_bytes(page: Any) -> int:
    """Decoded bytes of the page's content stream(s): what extracting its text reads.
    pypdf keeps a decoded stream, but re-reads its operators for every page that names
    it, so a stream shared by n pages is n times the work and counts n times here."""
    contents = page.get_contents()
    return len(contents.get_data()) if contents is not None else 0


def parse_pdf(data: bytes, limits: Limits) -> Parsed:
    """Each page's text, paragraphs by blank lines, under the heading path ``Page n``.

    A file that is not a readable PDF, or one that needs a password, is a 422; more
    pages than ``max_pdf_pages`` (checked before any page is read), more objects than
    ``max_pdf_objects``, or more content bytes read than ``max_decoded_bytes`` (every
    page's content counted, a shared stream once per page; one stream decompressing to
    more is refused by pypdf under the same bound) a 413. Unpaired surrogates a font
    maps glyphs to become U+FFFD. CPU time and memory are bounded by the process this
    runs in (serve_app/documents/sandbox.py)."""
    from pypdf import PdfReader, apply_configuration
    from pypdf.errors import LimitReachedError, PdfReadError, PyPdfError

    bound = limits.max_decoded_bytes
    with apply_configuration(
        maximum_declared_stream_length=bound,
        array_based_stream_maximum_output_length=bound,
        lzw_maximum_output_length=bound,
        run_length_maximum_output_length=bound,
        zlib_maximum_output_length=bound,
        brotli_maximum_output_length=bound,
        stream_decoding_work_maximum_length=bound,
    ):
        try:
            return _parse_pdf(PdfReader, data, limits)
        except LimitReachedError as exc:
            raise DocumentRefused(413, f"the PDF is over a parse bound ({exc})"[:300]) from None
        except DocumentRefused:
            raise
        except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise DocumentRefused(
                422, f"the file is not a readable PDF ({type(exc).__name__})"
            ) from None


def _parse_pdf(reader_type: Any, data: bytes, limits: Limits) -> Parsed:
    from pypdf.errors import LimitReachedError, PyPdfError

    reader = reader_type(io.BytesIO(data), strict=False)
    objects = _objects(reader)
    if objects > limits.max_pdf_objects:
        raise DocumentRefused(
            413, f"the PDF has {objects} objects; at most {limits.max_pdf_objects}"
        )
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
    if pages > limits.max_pdf_pages:
        raise DocumentRefused(413, f"the PDF has {pages} pages; at most {limits.max_pdf_pages}")
    out = _Builder(limits)
    read = 0
    for n in range(pages):
        try:
            page = reader.pages[n]
            read += _content_bytes(page)
            if read > limits.max_decoded_bytes:
                raise DocumentRefused(
                    413,
                    f"the PDF's pages 1..{n + 1} hold over {limits.max_decoded_bytes} bytes"
                    " of content",
                )
            page_text = page.extract_text() or ""
        except (DocumentRefused, LimitReachedError, MemoryError):
            raise
        except Exception as exc:  # pypdf raises many types on a broken page stream
            raise DocumentRefused(
                422, f"page {n + 1} of the PDF is unreadable ({type(exc).__name__})"
            ) from None
        page_text = _valid_text(page_text.replace("\x00", ""))
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
    return out.done(_valid_text(title) if title else None)


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
