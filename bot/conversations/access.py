"""Who may use the bot where: allowlists, the participants of conversations, and events
already seen.

Every front end checks its allowlist at every entry point (through the conversation
service's `Admission`). Allowlists are sets of platform ids; an empty set allows everyone. A
place that is not allowed is ignored silently (no noise in channels the operator did not
choose). Commands that act on a conversation (files, export, reset, Stop, Re-run) are for
its participants, who started it or took part, and for moderators.

A direct message has no server, channel or roles of its own, so it is admitted for the
people the rules admit somewhere: the platform looks up where the sender is (a member of an
allowed server with their roles there, a member of an allowed channel; see `presence`) and
the rules are applied to those places. `dm_users` admits people by DM without that.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.conversations.shared_events import SharedEvents


@dataclass(frozen=True, slots=True)
class AccessRules:
    servers: frozenset[str] = frozenset()
    """Discord servers (guilds) or Slack workspaces (teams)."""
    channels: frozenset[str] = frozenset()
    """Channels; a thread counts as its parent channel."""
    roles: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    """Only these people, anywhere (DMs included)."""
    dms: bool = True
    dm_users: frozenset[str] = frozenset()
    """People admitted by DM even where the place rules would not find them."""
    cooldown_s: float = 0.0
    """Least time between the starts of one user's turns."""

    @property
    def limits_places(self) -> bool:
        """Whether the rules name places, so that a DM needs to know where its sender is."""
        return bool(self.servers or self.channels or self.roles)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message came from, in platform ids."""

    user: str
    server: str | None = None
    channel: str | None = None
    roles: Iterable[str] = ()
    dm: bool = False
    found_in: tuple[Place, ...] = ()
    """For a DM: the places the platform found its sender in, among those the rules name."""


def allowed(rules: AccessRules, place: Place) -> bool:
    """Whether the rules let this person use the bot from this place."""
    if rules.users and place.user not in rules.users:
        return False
    if place.dm:
        if not rules.dms:
            return False
        if place.user in rules.dm_users or not rules.limits_places:
            return True
        return any(
            not where.dm and where.user == place.user and allowed(rules, where)
            for where in place.found_in
        )
    if rules.servers and place.server not in rules.servers:
        return False
    if rules.channels and place.channel not in rules.channels:
        return False
    return not rules.roles or bool(rules.roles & set(place.roles))


class Seen:
    """Ids handled recently, so that a redelivered event is not handled twice: by this
    process, and with `shared`, by any replica."""

    def __init__(self, size: int = 10_000, shared: SharedEvents | None = None) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size
        self.shared = shared

    def first_time(self, key: str) -> bool:
        """True the first time `key` is seen (and remember it)."""
        if key in self._ids:
            self._ids.move_to_end(key)
            return False
        self._ids[key] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)
        return self.shared is None or self.shared.first_time(key)


class Participants:
    """Who took part in which conversation, for the most recent `size` conversations.

    Kept in memory: after a restart a participant is known again once they take part again
    (moderators always may act; Discord also asks who started the conversation's thread)."""

    def __init__(self, size: int = 20_000) -> None:
        self._people: OrderedDict[str, set[str]] = OrderedDict()
        self._size = size

    def add(self, conversation: str, user: str) -> None:
        self._people.setdefault(conversation, set()).add(user)
        self._people.move_to_end(conversation)
        while len(self._people) > self._size:
            self._people.popitem(last=False)

    def includes(self, conversation: str, user: str) -> bool:
        return user in self._people.get(conversation, ())
