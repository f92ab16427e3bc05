"""PDF and HTML parsed in a limited child process: hostile files built here (a content
stream every page shares, form XObjects drawing each other ten times four levels deep, a
stream inflating past memory) are killed or refused at their limit with a 413 that names
it and says what the parse cost; honest files parse as they do in process; HTML parses
in linear time."""

from __future__ import annotations

import contextlib
import statistics
import time

import pytest

from serve_app.documents.parse import DocumentRefused, Limits, parse, parse_html
from serve_app.documents.sandbox import Box, Refused, parse_bounded, units
from serve_app.testing.pdfs import (
    shared_stream_bomb,
    stream_bomb,
    surrogate_pdf,
    text_pdf,
    xobject_bomb,
)

LIMITS = Limits()
PDF = "application/pdf"


def test_an_honest_pdf_and_html_parse_as_in_process():
    data = text_pdf(["Refunds take five days.", "Shipping is free."])
    parsed, cpu_s = parse_bounded(PDF, text=None, data=data, limits=LIMITS, box=Box())
    here = parse(PDF, text=None, data=data, limits=LIMITS)
    assert (parsed.text, parsed.blocks, parsed.title) == (here.text, here.blocks, here.title)
    assert cpu_s > 0  # the child's own CPU time comes back, to be charged
    html = "<title>T</title><h1>Leave</h1><p>Ask &amp; wait.</p><p>caf\u00e9 \U0001f600</p>"
    parsed, _ = parse_bounded("text/html", text=html, data=None, limits=LIMITS, box=Box())
    assert parsed.text == "Ask & wait.\n\ncaf\u00e9 \U0001f600" and parsed.title == "T"
    assert parsed.blocks == parse("text/html", text=html, data=None, limits=LIMITS).blocks


def test_plain_text_stays_in_process_and_costs_no_parse_units():
    parsed, cpu_s = parse_bounded("text/plain", text="a\n\nb", data=None, limits=LIMITS, box=Box())
    assert [parsed.text[b.start : b.end].strip() for b in parsed.blocks] == ["a", "b"]
    assert cpu_s == 0.0


def test_nested_form_xobjects_are_killed_at_the_cpu_limit():
    """2 * 10**6 text operators read for a 2 kB file (a form of 2,000 drawn 10**3
    times; over 30 s of pypdf): the kernel stops the child at its 1 s of CPU."""
    with pytest.raises(Refused) as refused:
        parse_bounded(PDF, text=None, data=xobject_bomb(), limits=LIMITS, box=Box(cpu_s=1))
    assert refused.value.status == 413
    assert "MEMSERVE_DOC_PARSE_CPU_S" in str(refused.value)
    assert refused.value.cpu_s == 1.0  # a killed parse costs its whole limit


def test_a_content_stream_shared_by_every_page_is_refused():
    data = shared_stream_bomb(pages=1000, operators=200_000)  # 1.4 MB read per page
    assert len(data) < 16384
    with pytest.raises(Refused) as by_bytes:  # the bound on content read: before page 2
        parse_bounded(
            PDF, text=None, data=data, limits=Limits(max_decoded_bytes=2_000_000), box=Box()
        )
    assert by_bytes.value.status == 413 and "bytes of content" in str(by_bytes.value)
    with pytest.raises(Refused) as by_cpu:  # default bounds: the CPU limit stops it first
        parse_bounded(PDF, text=None, data=data, limits=LIMITS, box=Box(cpu_s=1))
    assert by_cpu.value.status == 413 and "CPU" in str(by_cpu.value)


def test_objects_and_memory_are_bounded():
    with pytest.raises(Refused) as objects:
        parse_bounded(
            PDF, text=None, data=text_pdf(["a"] * 10), limits=Limits(max_pdf_objects=20), box=Box()
        )
    assert objects.value.status == 413 and "objects" in str(objects.value)
    # A stream inflating to 200 MB, past a 64 MB decode bound ...
    with pytest.raises(Refused) as decoded:
        parse_bounded(
            PDF, text=None, data=stream_bomb(), limits=Limits(max_decoded_bytes=64 << 20), box=Box()
        )
    assert decoded.value.status == 413
    # ... and, with that bound lifted, past the child's 160 MB of address space.
    with pytest.raises(Refused) as memory:
        parse_bounded(
            PDF,
            text=None,
            data=stream_bomb(),
            limits=Limits(max_decoded_bytes=1 << 30),
            box=Box(memory_bytes=160 << 20),
        )
    assert memory.value.status == 413 and "MEMSERVE_DOC_PARSE_MEMORY_MB" in str(memory.value)


def test_a_glyph_mapped_to_a_lone_surrogate_becomes_a_replacement_character():
    parsed, _ = parse_bounded(PDF, text=None, data=surrogate_pdf(), limits=LIMITS, box=Box())
    assert parsed.text == "Refunds take five days\ufffd"
    parsed.text.encode("utf-8")  # storable


def test_html_with_a_lone_surrogate_is_422():
    with pytest.raises(Refused) as refused:
        parse_bounded("text/html", text="<p>a\ud800</p>", data=None, limits=LIMITS, box=Box())
    assert refused.value.status == 422 and "surrogate" in str(refused.value)


def test_units_follow_the_cpu_time():
    assert units(0.01, 0.5) == 1.0 and units(0.5, 0.5) == 1.0 and units(10.0, 0.5) == 20.0


def _median_s(text: str) -> float:
    times = []
    for _ in range(3):
        started = time.process_time()
        with contextlib.suppress(DocumentRefused):  # refused in linear time is as good
            parse_html(text, LIMITS)
        times.append(time.process_time() - started)
    return statistics.median(times)


NESTED = "<div>" * 500 + "<p>deep</p>" + "</div>" * 500  # just under the depth bound


@pytest.mark.parametrize(
    "unit,n",
    [
        ('<a b="', 5_000),
        ("<div>", 5_000),
        ("<ul><li>", 2_000),
        ("<p><b>x", 10_000),
        (NESTED, 20),
        ("<script>if (a<b) {}</script>", 20_000),
    ],
)
def test_malformed_html_parses_in_linear_time(unit, n):
    """The cost suite's bound (t(4n)/t(n) <= 8; 0.05 s of size-dependent work is the
    noise floor) on markup that was quadratic: unclosed attributes (html.parser), block
    elements nested without end (any HTML5 tree builder looks through the open elements
    at each: lexbor took 1 s for 20,000 ``<div>``, 6 s for 20,000 ``<ul><li>``)."""
    small, large = _median_s(unit * n), _median_s(unit * 4 * n)
    assert large / max(small, 0.05) <= 8, (small, large)


def test_html_nesting_is_bounded_and_named():
    with pytest.raises(DocumentRefused) as deep:
        parse_html("<div>" * 600 + "deep", LIMITS)
    assert deep.value.status == 413 and "deep" in str(deep.value)
    assert parse_html(NESTED, LIMITS).text == "deep"
    # closed elements, void and self-closing ones, and list items do not add up
    flat = "<div><p>a<br><img src=x><li>b</div>" * 2000 + "<ul>" + "<li>c" * 2000 + "</ul>"
    assert parse_html(flat, LIMITS).text.count("c") == 2000
