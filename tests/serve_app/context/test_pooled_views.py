"""Parts and time-free texts as views of the message (issue 29's CPU cut): the builder
asks for their vectors to be pooled from the message's encoder run (SearchQuery.view_of
/ view_spans) instead of encoding each one on its own."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from serve_app.context.evidence import Evidence, time_free_spans, without_time
from serve_app.context.fuse import part_views, probe_spans, shifted
from tests.serve_app.context.test_levers import ALL, Backend, build, mem

RULE = Evidence(0.35, 0.15, 0.1, 2, False, True)
MSG = "What city am I in? Suggest a dinner menu for guests on Saturday"
PART = "Suggest a dinner menu for guests on Saturday"


class Recording(Backend):
    """Backend that also keeps every SearchQuery."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.queries = []

    async def search(self, queries):
        self.queries.extend(queries)
        return await super().search(queries)


@given(st.lists(st.sampled_from(["on", "Saturday", "menu", "this", "weekend", "tea", " ", "\t"])))
def test_time_free_spans_are_the_words_without_time_keeps(words):
    text = " ".join(words)
    spans = time_free_spans(text)
    bare = without_time(text)
    assert (spans is None) == (bare is None)
    if spans is not None:
        assert " ".join(text[a:b] for a, b in spans) == bare


def test_parts_that_are_stretches_of_the_message_are_views_of_it():
    views = part_views([MSG, "What city am I in?", PART, "What do Anna like?"])
    start = MSG.index(PART)
    assert views == {
        "What city am I in?": (MSG, ((0, 18),)),
        PART: (MSG, ((start, start + len(PART)),)),
    }  # the per-person text is not in the message: encoded on its own
    bare, spans = probe_spans([PART])[PART]
    assert bare == "Suggest a dinner menu for guests"
    source, moved = shifted(views[PART], PART, spans)
    assert source == MSG and " ".join(MSG[a:b] for a, b in moved) == bare
    assert shifted(None, PART, spans) == (PART, spans)


def test_the_builder_asks_for_pooled_views_with_the_levers_on():
    lv = replace(ALL, evidence=RULE, pooled_parts=True, pooled_time_free=True)
    oslo = mem("Lives in Oslo", 0.5, 0.9)
    b = Recording(by_text={MSG: [oslo], "Suggest a dinner menu for guests": [oslo]})
    r = build(b, MSG, levers=lv)
    by_text = {q.text: q for q in b.queries}
    start = MSG.index(PART)
    assert by_text[MSG].view_of is None  # the message is encoded
    assert by_text[PART].view_of == MSG and by_text[PART].view_spans == (
        (start, start + len(PART)),
    )
    probe = by_text["Suggest a dinner menu for guests"]
    assert probe.mode == "dense" and probe.view_of == MSG
    assert " ".join(MSG[a:b] for a, b in probe.view_spans) == probe.text
    assert len(b.calls) == 1  # still one backend call
    assert [m["content"] for m in r.memories] == ["Lives in Oslo"]


def test_with_the_levers_off_every_text_is_encoded_on_its_own():
    b = Recording(by_text={})
    build(b, MSG, levers=replace(ALL, evidence=RULE))
    assert b.queries and all(q.view_of is None and q.view_spans == () for q in b.queries)
    # time-free pooling alone: a part's probe is a view of the part
    b2 = Recording(by_text={})
    build(b2, MSG, levers=replace(ALL, evidence=RULE, pooled_time_free=True))
    probes = {q.text: q.view_of for q in b2.queries if q.mode == "dense"}
    assert probes == {
        "What city am I in? Suggest a dinner menu for guests": MSG,
        "Suggest a dinner menu for guests": PART,
    }


def test_a_long_message_is_read_off_the_loop_and_keeps_the_first_parts():
    """A message over OFFLOAD_CHARS is split on a worker thread; its parts are the first
    ``max_parts`` with content, and a long run of punctuation is small talk."""
    from serve_app.context.builder import OFFLOAD_CHARS
    from serve_app.context.parts import read_message, split_parts

    noise = "?" * 8000
    assert read_message(noise, noise, True, 6) == (True, [])
    long = "Any good bakeries near me? " + "a? " * 3000 + "Plan a weekend trip for me."
    assert len(long) > OFFLOAD_CHARS
    assert split_parts(long, 3) == [
        long,
        "Any good bakeries near me?",
        "Plan a weekend trip for me.",
    ]
    b = Recording(by_text={})
    build(b, long, levers=replace(ALL, evidence=RULE))
    assert {q.text for q in b.queries} >= {
        "Any good bakeries near me?",
        "Plan a weekend trip for me.",
    }
    b2 = Recording(by_text={})
    r = build(b2, noise, levers=replace(ALL, evidence=RULE))
    assert b2.queries == [] and r.memories == []  # small talk: no search
