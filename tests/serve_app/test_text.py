from serve_app.text import dedupe_hash, normalize


def test_normalize_ignores_case_space_and_edge_punctuation():
    assert normalize("  My name is   ALEX. ") == normalize("my name is alex")


def test_hash_distinguishes_content():
    assert dedupe_hash("likes tea") != dedupe_hash("likes coffee")
    assert dedupe_hash("Likes tea!") == dedupe_hash("likes tea")


def test_entities_are_capitalised_runs_without_function_words():
    from serve_app.text import entity_candidates

    got = dict(entity_candidates("What book did Melanie read from Caroline's suggestion?"))
    assert got == {"melanie": False, "caroline": False}  # "What" is no name; possessive dropped
    got = dict(entity_candidates("I read Becoming Nicole at the LGBTQ center."))
    assert {"becoming nicole", "nicole", "lgbtq"} <= set(got)
    assert "i" not in got and "the" not in got


def test_sentence_initial_words_are_flagged():
    from serve_app.text import entity_candidates

    got = dict(entity_candidates("Painting is fun. We went to Paris."))
    assert got["painting"] is True  # only ever sentence-initial: maybe no name
    assert got["paris"] is False
