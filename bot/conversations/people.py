"""Who acts, and through which door: a front end's `Admission` (its allowlist, its people's
lines, the events it has seen), a `Person` with the platform's word on whether they moderate,
and the door's own checks. The refusals of a person who may not act here or on that are
`bot.errors.NotHere` and `NotYours`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.conversations.access import AccessRules, Place, Seen, allowed
from bot.conversations.lines import Lines

if TYPE_CHECKING:
    from bot.conversations.shared_events import SharedEvents


@dataclass(frozen=True, slots=True)
class Person:
    user: str
    place: Place
    vouched: Callable[[], Awaitable[bool]] | None = None
    """The platform's word that this person may act on any conversation here (a moderator,
    or who started the conversation's thread); asked only when nothing else allows it."""
    moderates: Callable[[], Awaitable[bool]] | None = None
    """The platform's word that this person moderates here (and nothing else): for code
    approvals, the code policy and usage."""


class Admission:
    """One front end's door: its allowlist, its people's lines, the events it has seen."""

    def __init__(self, rules: AccessRules, shared: SharedEvents | None = None) -> None:
        self.rules = rules
        self.lines = Lines(rules.cooldown_s)
        self.seen = Seen(shared=shared)

    def allows(self, place: Place) -> bool:
        return allowed(self.rules, place)
