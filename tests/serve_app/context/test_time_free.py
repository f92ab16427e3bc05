"""The evidence rule's ``time_free`` lever (issue 29, "no noise"): a message's time
words ("on Saturday", "this weekend") can take similarity away from an item but never
add it; the builder searches the parts with time words once more without them."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from serve_app.context.evidence import Evidence, is_time_word, stems, without_time
from serve_app.context.fuse import probe_spans, topic_cosines
from tests.serve_app.context.test_levers import ALL, Backend, build, mem

RULE = Evidence(0.35, 0.15, 0.1, 2, False, True)
MENU = "Suggest a dinner menu for guests on Saturday"
TENNIS = "Plays tennis at the club on Wednesday evenings"


def test_time_words_and_their_leads_are_dropped():
    assert without_time(MENU) == "Suggest a dinner menu for guests"
    assert without_time("Where can I take good photos this weekend near home?") == (
        "Where can I take good photos near home?"
    )
    assert without_time("What exercise can I do outside in January?") == (
        "What exercise can I do outside"
    )
    assert without_time("Recommend a show for Friday night") == "Recommend a show"
    # nothing to drop, or nothing but time: the plain cosine stands
    assert without_time("How do I improve my tennis serve?") is None
    assert without_time("What about next weekend?") is None
    assert is_time_word("Saturday?") and is_time_word("tonight's")
    assert not any(map(is_time_word, ["Saturn", "sundae", "May", "nightclub"]))


@given(st.text(alphabet=st.sampled_from(list("ab .,?Saturdy")), max_size=300))
def test_without_time_never_adds_words(text):
    bare = without_time(text)
    if bare is not None:
        assert set(bare.split()) <= set(text.split())
        assert not any(is_time_word(w) for w in bare.split())


def test_a_when_word_takes_similarity_away_but_never_adds_it():
    msg = stems(MENU)
    # 0.40 with "on Saturday", 0.27 without: the tennis club's weekday did the matching
    assert RULE.admit([(0.40, stems(TENNIS))], msg, [0.27]) == [None]
    assert replace(RULE, time_free=False).admit([(0.40, stems(TENNIS))], msg, [0.27])[0]
    # higher without the time words: the plain cosine is judged, as before
    jazz = RULE.admit([(0.37, stems("Listens to old jazz records"))], msg, [0.44])[0]
    assert jazz == "similar to the message (cosine 0.37)"
    lower = RULE.admit([(0.53, stems("x"))], msg, [0.40])[0]
    assert lower == "similar to the message (cosine 0.40 without its time words)"
    # the margin is taken against the best judged cosine
    hike, bike = (0.53, stems("Enjoys hiking")), (0.45, stems("Commutes by bike"))
    assert RULE.admit([hike, bike], msg, [0.30, 0.45]) == [None, RULE.why(0.45, bike[1], msg)]
    # the shared-words path keeps the plain cosine
    both = stems("Hosting a dinner for guests: needs a menu")
    assert RULE.admit([(0.3, both)], msg, [-1.0])[0].startswith("shares")


def test_probes_and_their_cosines():
    probes = probe_spans([MENU, "Any good bakeries?"])
    bare = {t: text for t, (text, _) in probes.items()}
    assert bare == {MENU: "Suggest a dinner menu for guests"}
    a, b = mem("a", 0.4), mem("b", 0.3)
    batches = [[a, b], [dict(a, similarity=0.5)], [dict(b, similarity=0.2)]]
    # the first search had time words (not free), the others are free
    assert topic_cosines(batches, [False, True, True]) == {str(a["id"]): 0.5, str(b["id"]): 0.2}


def test_builder_searches_without_time_words_and_gates_on_the_lower_cosine():
    tennis = mem(TENNIS, 0.40, 0.95)
    celiac = mem("Cooks a lot for friends at home", 0.36, 0.8)
    bare = "Suggest a dinner menu for guests"
    found_bare = [dict(tennis, similarity=0.27), dict(celiac, similarity=0.38)]
    b = Backend(by_text={MENU: [tennis, celiac], bare: found_bare})
    lv = replace(ALL, evidence=RULE)
    r = build(b, MENU, levers=lv)
    assert len(b.calls) == 1 and b.calls[0] == [MENU, bare]  # one backend call
    assert [m["content"] for m in r.memories] == ["Cooks a lot for friends at home"]
    assert r.memories[0]["topic_similarity"] == 0.38
    # the lever off: no second search, the time words count
    b2 = Backend(by_text=b.by_text)
    r2 = build(b2, MENU, levers=replace(lv, evidence=replace(RULE, time_free=False)))
    assert b2.calls[0] == [MENU] and TENNIS in [m["content"] for m in r2.memories]
    assert "topic_similarity" not in r2.memories[0]


def test_a_memory_the_time_free_search_did_not_find_is_not_similar():
    msg = "Plan a weekend trip for me"
    hiking = mem("Enjoys hiking in Nordmarka on weekends", 0.53, 0.95)
    b = Backend(by_text={msg: [hiking], "Plan trip for me": []})
    r = build(b, msg, levers=replace(ALL, evidence=RULE))
    assert r.memories == []
