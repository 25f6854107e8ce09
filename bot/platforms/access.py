"""Who may use the bot where, and how often: allowlists, one turn per user, cooldowns, and
who may act on a conversation.

Every front end asks the same `Gate`, at every entry point. Allowlists are sets of platform
ids; an empty set allows everyone. A place that is not allowed is ignored silently (no noise
in channels the operator did not choose); a person who is too fast is told when to try
again. Commands that act on a conversation (files, export, reset, Stop, Re-run) are for its
participants, who started it or took part, and for moderators.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AccessRules:
    servers: frozenset[str] = frozenset()
    """Discord servers (guilds) or Slack workspaces (teams)."""
    channels: frozenset[str] = frozenset()
    """Channels; a thread counts as its parent channel."""
    roles: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    dms: bool = True
    cooldown_s: float = 0.0
    """Least time between the starts of one user's turns."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message came from, in platform ids."""

    user: str
    server: str | None = None
    channel: str | None = None
    roles: Iterable[str] = ()
    dm: bool = False


NOT_HERE = "Cellmate is not enabled here."
NOT_YOURS = "Only the people taking part in this conversation, or a moderator, can do that."


class Refused(Exception):
    """A turn may not start; the message says why (and when to try again), for the user."""


class Busy(Refused):
    """The user has a turn running, or started one too recently."""


@dataclass(slots=True)
class Gate:
    rules: AccessRules = field(default_factory=AccessRules)
    _running: set[str] = field(default_factory=set)
    _last_start: dict[str, float] = field(default_factory=dict)
    participants: Participants = field(default_factory=lambda: Participants())

    def allows(self, place: Place) -> bool:
        rules = self.rules
        if rules.users and place.user not in rules.users:
            return False
        if place.dm:
            return rules.dms
        if rules.servers and place.server not in rules.servers:
            return False
        if rules.channels and place.channel not in rules.channels:
            return False
        return not rules.roles or bool(rules.roles & set(place.roles))

    def may_act(self, conversation: str, user: str, moderator: bool = False) -> bool:
        """Whether `user` may act on `conversation` (read its files, export, reset, stop or
        re-run in it). The place must be allowed too: ask `allows` first."""
        return moderator or self.participants.includes(conversation, user)

    @property
    def running(self) -> frozenset[str]:
        """Users with a turn running now."""
        return frozenset(self._running)

    @contextlib.contextmanager
    def turn(self, user: str) -> Iterator[None]:
        """Hold the user's one running turn; raise `Busy` if they have one or are too quick."""
        if user in self._running:
            raise Busy(
                "You already have a turn running. Wait for it to finish, or press Stop on it."
            )
        now = time.monotonic()
        wait = self._last_start.get(user, -1e9) + self.rules.cooldown_s - now
        if wait > 0:
            raise Busy(f"Please wait {math.ceil(wait)} s before starting another turn.")
        self._running.add(user)
        self._last_start[user] = now
        try:
            yield
        finally:
            self._running.discard(user)


class Seen:
    """Ids handled recently, so that a redelivered event is not handled twice."""

    def __init__(self, size: int = 10_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def first_time(self, key: str) -> bool:
        """True the first time `key` is seen (and remember it)."""
        if key in self._ids:
            self._ids.move_to_end(key)
            return False
        self._ids[key] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)
        return True


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
