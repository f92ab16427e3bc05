"""Parsing (plain, Markdown, HTML, PDF made here with pypdf) and chunking with the active
model's real tokenizer."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from serve_app.documents.chunking import chunk, load_tokenizer, sizes_for
from serve_app.documents.parse import DocumentRefused, Limits, parse
from serve_app.settings import get_settings

LIMITS = Limits()


def pdf_bytes(pages: list[str], *, password: str | None = None) -> bytes:
    """A real PDF with one text line per page (Helvetica), written by pypdf."""
    writer = PdfWriter()
    for text in pages:
        page = writer.add_blank_page(width=612, height=792)
        font = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})}
        )
        stream = DecodedStreamObject()
        safe = text.replace("(", "[").replace(")", "]")
        stream.set_data(f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
    if password is not None:
        writer.encrypt(password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(get_settings().embed.model)


def test_markdown_sections_and_fences():
    md = (
        "# Guide\n\nIntro.\n\n## Install\n\nStep one.\n\n"
        "```\n# not a heading\n```\n\n## Use\n\nRun it.\n"
    )
    parsed = parse("text/markdown", text=md, data=None, limits=LIMITS)
    got = [(parsed.text[b.start : b.end].strip(), b.heading_path) for b in parsed.blocks]
    assert got[0] == ("Intro.", ("Guide",))
    assert ("Step one.", ("Guide", "Install")) in got
    assert any("# not a heading" in t and p == ("Guide", "Install") for t, p in got)
    assert got[-1] == ("Run it.", ("Guide", "Use"))
    assert parsed.title == "Guide"


def test_html_text_headings_and_no_scripts():
    html = (
        "<html><head><title>Handbook</title><style>p{}</style></head><body>"
        "<h1>Leave</h1><p>Ask &amp; wait.</p><script>alert(1)</script>"
        "<h2>Sick</h2><ul><li>Call in</li><li>Rest</li></ul></body></html>"
    )
    parsed = parse("text/html", text=html, data=None, limits=LIMITS)
    got = [(parsed.text[b.start : b.end], b.heading_path) for b in parsed.blocks]
    assert got == [
        ("Ask & wait.", ("Leave",)),
        ("Call in", ("Leave", "Sick")),
        ("Rest", ("Leave", "Sick")),
    ]
    assert parsed.title == "Handbook"
    assert "alert" not in parsed.text and "p{}" not in parsed.text


def test_pdf_pages_become_blocks():
    data = pdf_bytes(["Refunds take five days.", "Shipping is free over fifty euros."])
    parsed = parse("application/pdf", text=None, data=data, limits=LIMITS)
    got = [(parsed.text[b.start : b.end], b.heading_path) for b in parsed.blocks]
    assert got == [
        ("Refunds take five days.", ("Page 1",)),
        ("Shipping is free over fifty euros.", ("Page 2",)),
    ]


def test_bad_pdfs_are_422_and_too_many_pages_413():
    with pytest.raises(DocumentRefused) as bad:
        parse("application/pdf", text=None, data=b"%PDF-1.4 garbage", limits=LIMITS)
    assert bad.value.status == 422
    with pytest.raises(DocumentRefused) as locked:
        parse("application/pdf", text=None, data=pdf_bytes(["x"], password="s3cret"), limits=LIMITS)
    assert locked.value.status == 422 and "encrypted" in str(locked.value)
    with pytest.raises(DocumentRefused) as big:
        parse(
            "application/pdf",
            text=None,
            data=pdf_bytes(["a", "b", "c"]),
            limits=Limits(max_pdf_pages=2),
        )
    assert big.value.status == 413


def test_text_bounds_and_empty():
    with pytest.raises(DocumentRefused) as big:
        parse("text/plain", text="x" * 101, data=None, limits=Limits(max_chars=100))
    assert big.value.status == 413
    with pytest.raises(DocumentRefused) as empty:
        parse("text/html", text="<script>only()</script>", data=None, limits=LIMITS)
    assert empty.value.status == 422
    with pytest.raises(DocumentRefused) as latin:
        parse("text/plain", text=None, data="caf\xe9".encode("latin-1"), limits=LIMITS)
    assert latin.value.status == 422


def test_sizes_follow_the_model_window():
    assert sizes_for(256, 512, 50, 8000).tokens == 254  # MiniLM: its window
    assert sizes_for(512, 512, 50, 8000).tokens == 510  # bge: the seed's 512 (less CLS/SEP)
    assert sizes_for(512, 512, 50, 8000).overlap == 50


def test_chunks_fit_the_window_overlap_and_keep_sections(tokenizer):
    words = " ".join(f"w{i}" for i in range(900))
    md = f"# A\n\nShort intro.\n\n## B\n\n{words}\n\n## C\n\nThe end."
    parsed = parse("text/markdown", text=md, data=None, limits=LIMITS)
    sizes = sizes_for(256, 512, 50, 8000)
    chunks = chunk(parsed, tokenizer, sizes, 100)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        n = len(tokenizer.encode(c.text, add_special_tokens=False).ids)
        assert n <= sizes.tokens, (c.index, n)
        assert parsed.text[c.char_start : c.char_end] == c.text
    assert chunks[0].heading_path == ("A",) and chunks[0].text == "Short intro."
    body = [c for c in chunks if c.heading_path == ("A", "B")]
    assert len(body) >= 3
    for prev, nxt in zip(body, body[1:], strict=False):
        assert nxt.char_start < prev.char_end  # overlap with the previous chunk
        assert prev.text.split()[-1] in nxt.text.split()  # whole words shared
        assert parsed.text[nxt.char_start - 1] == " "  # starts at a word
    assert chunks[-1].heading_path == ("A", "C") and chunks[-1].text == "The end."
    covered = " ".join(c.text for c in body)
    assert all(f"w{i}" in covered.split() for i in range(900))


def test_too_many_chunks_is_413(tokenizer):
    text = "\n\n".join(f"para {i} " + "word " * 300 for i in range(20))
    parsed = parse("text/plain", text=text, data=None, limits=LIMITS)
    with pytest.raises(DocumentRefused) as exc:
        chunk(parsed, tokenizer, sizes_for(256, 512, 50, 8000), 5)
    assert exc.value.status == 413


def test_a_giant_unknown_word_is_cut_under_the_char_cap(tokenizer):
    parsed = parse("text/plain", text="a" * 20000, data=None, limits=LIMITS)
    chunks = chunk(parsed, tokenizer, sizes_for(256, 512, 50, 8000), 100)
    assert all(len(c.text) <= 8000 for c in chunks)
    assert chunks[-1].char_end == 20000


def test_a_declared_page_bomb_is_413_before_the_page_tree_is_walked():
    """A few-kB PDF whose page tree declares 2**20 pages is refused from its root's
    ``/Count`` (the walk behind ``len(reader.pages)`` took 4 s of CPU); the message says
    what the file declared."""
    from serve_app.testing.pdfs import page_bomb

    data = page_bomb()
    assert len(data) < 8192
    with pytest.raises(DocumentRefused) as refused:
        parse("application/pdf", text=None, data=data, limits=Limits(max_pdf_pages=1000))
    assert refused.value.status == 413 and "declares 1048576 pages" in str(refused.value)
