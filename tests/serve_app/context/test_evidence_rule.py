"""The evidence rule of a context block (issue 29, "no noise"): what must be admitted,
and noise that must not be, for each of the rule's levers on its own."""

from __future__ import annotations

from dataclasses import replace

from serve_app.context.evidence import FEATURES, TIME_STEMS, Evidence, admission, features, stems
from serve_app.services.context import levers
from serve_app.settings.retrieval import ContextSettings
from tests.serve_app.context.test_levers import ALL, Backend, build, mem

TRIP = stems("Plan a weekend trip for me")
HIKING = stems("Enjoys hiking in Nordmarka on weekends")


def test_paraphrase_and_shared_words_are_admitted():
    ev = Evidence(strong=0.45, weak=0.2, margin=0.3, min_shared=1, ignore_time_words=True)
    msg = stems("When did Caroline go to the LGBTQ support group?")
    turn = stems("Caroline: I went to a LGBTQ support group yesterday, it was so powerful")
    # a dialogue turn matches a question by its words more than by its embedding
    assert ev.admit([(0.5, stems("x")), (0.24, turn)], msg)[1].startswith("shares")
    assert ev.admit([(0.46, stems("Loves croissants"))], stems("bakeries?"))[0].startswith(
        "similar"
    )


def test_noise_without_evidence_is_not_admitted():
    ev = Evidence(strong=0.45, weak=0.2)
    msg = stems("Any good bakeries around here?")
    assert ev.admit([(0.3, stems("Lives in Oslo near the fjord"))], msg) == [None]
    assert ev.admit([(-0.001, stems("Lives in Oslo"))], msg) == [None]  # neighbour boost only
    assert ev.admit([(None, stems("bakery"))], msg) == [None]
    assert ev.admit([], msg) == []


def test_margin_drops_what_lies_far_below_the_best_candidate():
    on = Evidence(strong=0.4, weak=0.2, margin=0.2, min_shared=2)
    off = Evidence(strong=0.4, weak=0.2, min_shared=2)
    msg = stems("How do I improve my tennis serve?")
    cands = [
        (0.72, stems("Plays tennis twice a week")),
        (0.45, stems("Signed up for a tennis tournament in June")),
        (0.6, stems("Takes tennis lessons on Mondays")),
    ]
    assert [w is not None for w in on.admit(cands, msg)] == [True, False, True]
    assert all(w is not None for w in off.admit(cands, msg))
    # the margin is relative: the same cosine is admitted when it is this message's best
    assert on.admit([(0.45, stems("Signed up for a tennis tournament"))], msg)[0] is not None
    # and it does not hold back what shares enough words (a name and a topic)
    serve = (0.3, stems("Coach said my tennis serve needs a higher toss"))
    assert on.admit([cands[0], serve], msg)[1].startswith("shares")


def test_min_shared_asks_more_than_one_word_below_strong():
    two = Evidence(strong=0.5, weak=0.2, min_shared=2)
    msg = stems("Find us a restaurant for the whole family with a vegan menu")
    budget = stems("Wants to keep the family vacation under 3000 dollars")
    vegan = stems("Her family went vegan last year, so the menu matters")
    assert two.admit([(0.3, budget)], msg) == [None]
    assert two.admit([(0.3, vegan)], msg)[0].startswith("shares")
    assert Evidence(0.5, 0.2).admit([(0.3, budget)], msg)[0] is not None  # lever off


def test_time_words_are_no_evidence_when_ignored():
    assert {"weeke", "satur", "tonig"} <= TIME_STEMS
    on = Evidence(strong=0.5, weak=0.2, ignore_time_words=True)
    assert on.admit([(0.3, HIKING)], TRIP) == [None]
    assert Evidence(0.5, 0.2).admit([(0.3, HIKING)], TRIP)[0] is not None  # lever off
    # a real shared word still counts beside a time word
    assert on.admit([(0.3, stems("Took a weekend trip to Bergen"))], TRIP)[0] is not None


def test_builder_applies_the_rule_against_the_best_part_cosine():
    msg = "Plan a weekend trip for me"
    hiking = mem("Enjoys hiking in Nordmarka on weekends", 0.36, 0.6)
    bergen = mem("Loved the weekend trip to Bergen by train", 0.66, 0.7)
    b = Backend(by_text={msg: [hiking, bergen]})
    strict = replace(ALL, evidence=Evidence(0.45, 0.2, 0.25, 1, True))
    got = [m["content"] for m in build(b, msg, levers=strict).memories]
    assert got == ["Loved the weekend trip to Bergen by train"]
    loose = replace(ALL, evidence=Evidence(0.3, 0.2))
    assert len(build(b, msg, levers=loose).memories) == 2


def test_settings_reach_the_rule():
    s = ContextSettings(
        evidence_similarity=0.5,
        evidence_similarity_lexical=0.25,
        evidence_margin=0.3,
        evidence_min_shared=2,
        evidence_ignore_time_words=True,
        evidence_time_free=False,
    )
    assert levers(s).evidence == Evidence(0.5, 0.25, 0.3, 2, True, False, fill=0, floor=0.25)
    learned = ContextSettings(evidence_learned=(1, 2, 3, 4, 5, 6), evidence_learned_min=0.4)
    assert levers(learned).evidence.learned == (1, 2, 3, 4, 5, 6)
    assert levers(ContextSettings()).evidence.time_free  # the calibrated default
    d = levers(ContextSettings()).evidence
    assert d.weak <= d.strong and d.min_shared >= 1


def test_a_profile_memory_over_the_cap_still_competes_as_retrieved():
    """Only what the profile section shows leaves the candidates: a profile memory the
    cap leaves out, retrieved on evidence, is in the block's memories (it was lost)."""
    msg = "When did Caroline go to the LGBTQ support group?"
    pad = " and" * 90  # ~100 tokens: one item fills the profile's cap (150 of 600)
    first = mem(
        "Caroline: identity note" + pad, None, profile_class="identity", pinned=None, importance=0.9
    )
    gold = mem(
        "Caroline: I went to a LGBTQ support group yesterday" + pad,
        0.82,
        0.9,
        profile_class="identity",
        pinned=None,
        importance=0.1,
    )
    long_ids = [first]
    b = Backend(profile=[*long_ids, gold], by_text={msg: [gold]})
    r = build(b, msg, token_budget=600)
    assert gold["content"] not in [p["content"] for p in r.profile]  # over the cap
    assert [m["content"] for m in r.memories] == [gold["content"]]
    # what the profile section does show is not repeated among the memories
    shown = r.profile[0]
    b2 = Backend(profile=[shown], by_text={msg: [dict(shown, similarity=0.9)]})
    r2 = build(b2, msg)
    assert [p["id"] for p in r2.profile] == [shown["id"]] and r2.memories == []


def test_fill_admits_the_best_ranked_over_the_floor_and_no_more():
    ev = Evidence(strong=0.45, weak=0.2, fill=2, floor=0.25)
    msg = stems("How do I charge my car on a long road trip?")
    cands = [
        (0.5, stems("Commutes by bike")),  # the rule admits it
        (0.31, stems("I drive a Tesla Model 3")),  # filled: best ranked over the floor
        (0.2, stems("Plays chess on Sundays")),  # under the floor: never
        (0.28, stems("Likes jazz")),  # filled: the second
        (0.27, stems("Has two cats")),  # over the floor, but the fill is spent
    ]
    reasons = ev.admit(cands, msg)
    assert reasons[0].startswith("similar")
    assert [r is not None for r in reasons[1:]] == [True, False, True, False]
    assert "best matches" in reasons[1]
    assert Evidence(0.45, 0.2).admit(cands, msg)[1:] == [None] * 4  # fill off: as before


def test_a_message_the_model_cannot_read_admits_only_on_a_high_cosine():
    ev = Evidence(strong=0.35, weak=0.15, min_shared=1, fill=3, floor=0.2).strict(0.6)
    msg = stems("Ich möchte mit Gisela eine Woche wandern gehen. Welche Region?")
    cands = [
        (0.45, stems("Likes the mountains")),  # similar enough in English, not here
        (0.3, stems("Has two cats")),  # no filling by rank either
        (0.65, stems("x")),  # a cosine this high still admits
        (0.2, stems("Gisela is her hiking partner")),  # a shared name is evidence anywhere
    ]
    assert [r is not None for r in ev.admit(cands, msg)] == [False, False, True, True]


def test_the_builder_guards_messages_in_another_language():
    pt = "Qual é a melhor forma de carregar o meu carro numa viagem longa?"
    cats = mem("Has two cats who fight over the window seat", 0.42, 0.5)
    b = Backend(by_text={pt: [cats]})
    open_gate = replace(ALL, evidence=Evidence(0.35, 0.15))
    assert len(build(b, pt, levers=open_gate).memories) == 1  # noise on a foreign message
    guarded = replace(open_gate, foreign_guard=True, foreign_similarity=0.6)
    assert build(b, pt, levers=guarded).memories == []
    en = "What is the best way to charge my car on a long trip?"
    b = Backend(by_text={en: [cats]})
    assert len(build(b, en, levers=guarded).memories) == 1  # English: judged as before


def test_learned_admission_weighs_the_candidates_the_rule_left_out():
    # weights of FEATURES then the bias: shared words count, rank costs
    weights = (0.0, 0.0, 2.0, -1.0, 0.0, -1.5)
    ev = Evidence(strong=0.45, weak=0.35, min_shared=2, learned=weights, learned_min=0.5)
    msg = stems("Any ideas for the garden and the roses this spring?")
    cands = [
        (0.5, stems("Grows tomatoes")),  # the rule admits it
        (0.3, stems("Her garden has old roses")),  # two shared words, early: p = 0.92
        (0.3, stems("Likes jazz")),  # nothing shared: p = 0.15
    ]
    reasons = ev.admit(cands, msg)
    assert reasons[0].startswith("similar") and reasons[1].startswith("likely needed")
    assert reasons[2] is None
    assert admission(weights, features(0.3, 0.3, 0.5, 2, 1)) > 0.9
    assert len(features(0.3, 0.3, 0.5, 2, 1)) == len(FEATURES) == len(weights) - 1
    assert ev.strict(0.6).learned == ()  # a foreign message: not by the model either
