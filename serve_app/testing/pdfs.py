"""PDF files written byte by byte, for tests that need honest ones and hostile ones.

``text_pdf`` is a valid PDF with one line of text per page. The hostile ones are small
files that cost a careless reader a lot: ``page_bomb`` declares 2**depth pages through
a page tree whose every level names the next level twice (a reader that walks it visits
them all), ``stream_bomb`` has one page whose Flate content stream inflates to
``inflated`` bytes (a few kB on disk), ``shared_stream_bomb`` has many pages that all
name one Flate content stream of many text operators (a reader parses it once per page),
``xobject_bomb`` one page that draws a form XObject which draws the next ``fanout``
times, ``depth`` deep (``fanout ** depth`` text operators for a reader that follows each
``Do``). ``surrogate_pdf`` shows text through a font whose ToUnicode map names a lone
surrogate (``<D800>``) for a glyph.
"""

from __future__ import annotations

import zlib


def _pdf(objects: list[bytes]) -> bytes:
    """Objects 1..n (object 1 the catalog) with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def _stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s>>\nstream\n" % (len(data), extra) + data + b"\nendstream"


def _escape(text: str) -> bytes:
    raw = text.encode("latin-1")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def text_pdf(pages: list[str]) -> bytes:
    """Catalog 1, pages 2, font 3, then per page its page object and its content."""
    n = len(pages)
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n),
        FONT,
    ]
    for i, line in enumerate(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % (5 + 2 * i)
        )
        objects.append(_stream(b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % _escape(line)))
    return _pdf(objects)


def page_bomb(depth: int = 20) -> bytes:
    """2**depth pages in a file of a few kB: each level's node has two kids, both the
    next level's node (objects: 1 catalog, 2 font, 3.. the levels, then leaf, content)."""
    leaf = 3 + depth
    objects = [b"<< /Type /Catalog /Pages 3 0 R >>", FONT]
    for level in range(depth):
        child = 3 + level + 1 if level + 1 < depth else leaf
        count = 2 ** (depth - level)
        node = b"<< /Type /Pages /Kids [%d 0 R %d 0 R] /Count %d >>"
        objects.append(node % (child, child, count))
    objects.append(
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
        b" /Resources << /Font << /F1 2 0 R >> >> >>" % (leaf - 1, leaf + 1)
    )
    objects.append(_stream(b"BT /F1 12 Tf 72 720 Td (again) Tj ET"))
    return _pdf(objects)


def stream_bomb(inflated: int = 200 * 1024 * 1024) -> bytes:
    """One page whose content stream is ``inflated`` bytes of spaces, Flate-compressed."""
    z = zlib.compressobj(9)
    block = b" " * (1024 * 1024)
    packed = b"".join(z.compress(block) for _ in range(inflated // len(block))) + z.flush()
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            FONT,
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>",
            _stream(packed, b"/Filter /FlateDecode "),
        ]
    )


def shared_stream_bomb(
    pages: int = 1000, operators: int = 200_000, op: bytes = b"(a) Tj "
) -> bytes:
    """``pages`` pages whose /Contents are one stream of ``operators`` ``op``s (a ``Tj``
    each by default; ``b"0 0 Td "`` reads as much and shows no text)."""
    ops = b"BT /F1 12 Tf 72 720 Td (a) Tj " + op * operators + b"ET"
    kids = b" ".join(b"4 0 R" for _ in range(pages))
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
            FONT,
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>",
            _stream(zlib.compress(ops, 9), b"/Filter /FlateDecode "),
        ]
    )


def xobject_bomb(depth: int = 4, fanout: int = 10, operators: int = 2000) -> bytes:
    """One page drawing form 0; form i draws form i+1 ``fanout`` times; the last shows
    ``operators`` words (objects: 1 catalog, 2 pages, 3 font, 4 page, 5 its content, 6..
    the forms). pypdf 7 stops after 5,000 form invocations per page; 10**3 invocations of
    a form of 2,000 operators are still 2 * 10**6 operators read from a 2 kB file."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        FONT,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R"
        b" /Resources << /Font << /F1 3 0 R >> /XObject << /X0 6 0 R >> >> >>",
        _stream(b"/X0 Do"),
    ]
    form = b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] "
    for level in range(depth):
        if level + 1 < depth:
            body = b"q /X Do Q " * fanout
            res = b"/Resources << /XObject << /X %d 0 R >> >> " % (7 + level)
        else:
            body = zlib.compress(b"BT /F1 12 Tf 72 720 Td " + b"(deep) Tj " * operators + b"ET")
            res = b"/Resources << /Font << /F1 3 0 R >> >> /Filter /FlateDecode "
        objects.append(_stream(body, form + res))
    return _pdf(objects)


def surrogate_pdf(text: str = "Refunds take five days") -> bytes:
    """One page of ``text`` then one glyph (code 0x01) that a ToUnicode CMap maps to
    ``<D800>``, an unpaired surrogate no UTF-8 text can hold."""
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        b"/CMapName /Bad def /CMapType 2 def\n"
        b"1 begincodespacerange <00> <FF> endcodespacerange\n"
        b"1 beginbfchar <01> <D800> endbfchar\n"
        b"endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 5 0 R >>"
    content = b"BT /F1 12 Tf 72 720 Td (%s) Tj <01> Tj ET" % _escape(text)
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            font,
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 6 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>",
            _stream(cmap),
            _stream(content),
        ]
    )
