from serve_app.text import dedupe_hash, normalize


def test_normalize_ignores_case_space_and_edge_punctuation():
    assert normalize("  My name is   ALEX. ") == normalize("my name is alex")


def test_hash_distinguishes_content():
    assert dedupe_hash("likes tea") != dedupe_hash("likes coffee")
    assert dedupe_hash("Likes tea!") == dedupe_hash("likes tea")
