"""Who said what (serve_app/extraction/speakers.py): aliases, prompt labels and whose
memory a statement goes to."""

from __future__ import annotations

from serve_app.extraction.prompts import extraction_user_prompt
from serve_app.extraction.speakers import Speakers
from serve_app.extraction.turn import Turn
from serve_app.store import Owner

ANN = Owner("t1", "ann")


def turns(*spec: tuple[str, str | None, str | None]) -> list[Turn]:
    """(role, name, speaker_id) per turn."""
    return [
        Turn(role, f"turn {i}", i, None, name, speaker)
        for i, (role, name, speaker) in enumerate(spec, 1)
    ]


def test_owner_talking_to_the_assistant_has_no_speakers():
    s = Speakers.of(turns(("user", None, None), ("assistant", None, None)), ANN)
    assert not s and s.block() == ""
    assert s.owner_for(None) == ANN and s.owner_for("anything") == ANN
    t = turns(("user", None, None))
    assert extraction_user_prompt(t, s) == extraction_user_prompt(t)  # today's prompt


def test_platform_users_and_named_guests_get_aliases_in_order():
    s = Speakers.of(
        turns(
            ("user", "Ann", "ann"),
            ("user", "Bo", "bo"),
            ("assistant", None, None),
            ("user", "Sam", None),
            ("user", "Bo", "bo"),
        ),
        ANN,
    )
    assert s.owner_name == "Ann"
    assert [(p.alias, p.name, p.user_id) for p in s.parties.values()] == [
        ("s1", "Bo", "bo"),
        ("s2", "Sam", None),
    ]
    t = turns(("user", "Ann", "ann"), ("user", "Bo", "bo"), ("assistant", None, None))
    assert [s.label(x) for x in t] == ["user me (Ann)", "user s1 (Bo)", "assistant"]
    prompt = extraction_user_prompt(t, s)
    assert "Speakers:" in prompt and "s2 (Sam): no account" in prompt
    assert "[2] user s1 (Bo): turn 2" in prompt


def test_statements_go_to_the_speaker_they_are_about():
    s = Speakers.of(turns(("user", None, None), ("user", "Bo", "bo"), ("user", "Sam", None)), ANN)
    assert s.owner_for("me") == ANN and s.owner_for(None) == ANN
    assert s.owner_for("s1") == Owner("t1", "bo")
    assert s.owner_for("Bo") == Owner("t1", "bo")  # a model that wrote the name
    assert s.owner_for("s2") is None  # Sam has no account: not the owner's fact either
    assert s.owner_for("s9") is None  # an alias nobody has
    assert s.owner_for("assistant") is None


def test_names_only_the_first_speaker_is_the_owner_when_every_turn_is_named():
    s = Speakers.of(turns(("user", "Ann", None), ("user", "Sam", None), ("user", "Ann", None)), ANN)
    assert s.owner_name == "Ann" and [p.name for p in s.parties.values()] == ["Sam"]
    assert s.alias(Turn("user", "x", 3)) == "me"


def test_a_named_guest_is_never_the_owner_when_the_owner_is_unnamed():
    """The owner's own turns carry no name: a guest who speaks first stays a guest."""
    s = Speakers.of(turns(("user", "Sam", None), ("user", None, None)), ANN)
    assert s.owner_name is None and [p.name for p in s.parties.values()] == ["Sam"]
    assert s.alias(Turn("user", "x", 2)) == "me" and s.alias(Turn("user", "x", 1)) == "s1"
    with_ids = Speakers.of(turns(("user", "Sam", None), ("user", "Bo", "bo")), ANN)
    assert with_ids.owner_name is None and len(with_ids.parties) == 2
