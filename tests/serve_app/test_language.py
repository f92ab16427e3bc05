"""Which messages the embedding model reads: English, and text too short to tell."""

from __future__ import annotations

import pytest

from serve_app.language import MAX_CHARS, language, model_reads


@pytest.mark.parametrize(
    "text",
    [
        "Can you suggest a recipe for dinner tonight?",
        "hey whats up, my pets keep fighting lol",
        "thanks!",  # too short to tell: judged as English
        "ok cool",
    ],
)
def test_english_and_short_texts_are_read(text):
    assert model_reads(text)


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("Kannst du mir ein Rezept für heute Abend empfehlen?", "de"),
        ("Qual é a melhor forma de carregar o meu carro?", "pt"),
        ("Peux-tu me conseiller un film ce soir ?", "fr"),
        ("Nakupenda sana rafiki yangu, habari ya asubuhi?", "sw"),
    ],
)
def test_other_languages_are_not(text, lang):
    assert language(text)[0] == lang
    assert not model_reads(text)


def test_only_the_start_of_a_long_text_is_read():
    text = "Kannst du mir ein Rezept für heute Abend empfehlen? " * 10 + "x" * 10 * MAX_CHARS
    assert not model_reads(text)  # decided on its first MAX_CHARS characters
