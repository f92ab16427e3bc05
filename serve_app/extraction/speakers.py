"""Who said what in a conversation, and whose memory a statement belongs to.

A session belongs to one user (its *owner*: the ``user_id`` of the call). In a group chat
or shared thread other people speak in it too. Each message may carry the OpenAI field
``name`` and a ``speaker_id``: a platform user of the same tenant. The extraction prompt
then names every speaker by a short alias (``me`` for the owner, ``s1``, ``s2`` ... for the
others, in order of first appearance) and asks, for each memory and fact, whom it is
``about``. :meth:`Speakers.owner_for` turns that answer into the memory to write to:

- ``me`` (or nothing): the session owner's memory;
- a speaker with a ``speaker_id`` who spoke in the batch: that user's own memory (what
  they said about themselves, under the same isolation, quota and forget rules as any
  write: :mod:`serve_app.store.erasure` guards it against their forget);
- a speaker without an account, an unknown alias, or the assistant: nothing. What a third
  party says about themselves is not a fact about the owner; the prompt asks the model to
  keep what the owner needs to know as the owner's own knowledge, naming that person
  ("Sam (friend) is allergic to walnuts"), and that comes back as ``about: me``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from serve_app.extraction.turn import Turn
from serve_app.store import Owner

OWNER_ALIAS = "me"

SPEAKER_RULES = """Several people speak in this conversation. Each turn shows its speaker:
"user me" is the user whose memory this is; "user s1", "user s2", ... are other people
(listed under Speakers). Give every memory and fact an "about": "me" when it is about the
user, or the speaker's alias when that speaker said it about themselves. What someone
says about another person is not a fact about that person's listener: keep it only if
the user needs it, written as the user's knowledge naming that person ("Sam (friend) is
allergic to walnuts"), about "me". What the assistant says is never a fact about anyone."""


@dataclass(frozen=True)
class Party:
    """One speaker other than the owner and the assistant."""

    alias: str
    name: str | None
    user_id: str | None  # a platform user of the tenant; None: no account

    def label(self) -> str:
        return self.name or self.user_id or self.alias


@dataclass
class Speakers:
    """The speakers of one batch of turns, by alias; empty: the owner and the assistant."""

    owner: Owner
    owner_name: str | None = None
    parties: dict[str, Party] = field(default_factory=dict)
    _by_turn: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, turns: Sequence[Turn], owner: Owner) -> Speakers:
        """A user turn is the owner's when its ``speaker_id`` is the owner, or when it has
        none and no name, or the owner's name. The owner's name is the name of their own
        turns (``speaker_id`` = the owner); in a conversation with names only, where
        every user turn is named, it is the first name (the session's user spoke first)."""
        users = [t for t in turns if t.role == "user"]
        own = next((t.name for t in users if t.speaker_id == owner.user_id and t.name), None)
        names_only = all(t.speaker_id is None and t.name for t in users)
        first = users[0].name if users and names_only else None
        out = cls(owner, owner_name=own or first)
        keys: dict[tuple[str | None, str | None], str] = {}
        for t in users:
            if t.speaker_id == owner.user_id or (
                t.speaker_id is None and t.name in (None, out.owner_name)
            ):
                continue
            key = (t.speaker_id, None if t.speaker_id else t.name)
            alias = keys.get(key)
            if alias is None:
                alias = keys[key] = f"s{len(keys) + 1}"
                out.parties[alias] = Party(alias, t.name, t.speaker_id)
            out._by_turn[t.turn_index] = alias
        return out

    def __bool__(self) -> bool:
        return bool(self.parties)

    def alias(self, turn: Turn) -> str:
        """The alias that said ``turn`` (``me`` for the owner, ``assistant``)."""
        if turn.role != "user":
            return turn.role
        return self._by_turn.get(turn.turn_index, OWNER_ALIAS)

    def label(self, turn: Turn) -> str:
        """How the prompt shows who said ``turn``: ``user s1 (Sam)``, ``user me (Ann)``."""
        if not self.parties:
            return turn.role
        alias = self.alias(turn)
        if turn.role != "user":
            return f"{turn.role} ({turn.name})" if turn.name else turn.role
        name = self.owner_name if alias == OWNER_ALIAS else self.parties[alias].label()
        return f"user {alias} ({name})" if name else f"user {alias}"

    def block(self) -> str:
        """The prompt's list of speakers ("" when the owner talks to the assistant)."""
        if not self.parties:
            return ""
        owner = f" ({self.owner_name})" if self.owner_name else ""
        lines = [f"  me{owner}: the user whose memory this is"]
        for p in self.parties.values():
            kind = "a user of the platform" if p.user_id else "no account"
            lines.append(f"  {p.alias} ({p.label()}): {kind}")
        return "Speakers:\n" + "\n".join(lines) + "\n"

    def owner_for(self, about: str | None) -> Owner | None:
        """Whose memory an item ``about`` a speaker goes to; None: to nobody's."""
        key = (about or OWNER_ALIAS).strip().lower()
        if key in (OWNER_ALIAS, "user") or not self.parties:
            return self.owner
        party = self.parties.get(key) or next(
            (p for p in self.parties.values() if p.name and p.name.lower() == key), None
        )
        if party is None or party.user_id is None:
            return None  # a third party's own statement, or an alias nobody has
        return Owner(self.owner.tenant_id, party.user_id)
