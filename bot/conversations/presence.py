"""Where the sender of a direct message is, as the platform reports it, so that `allowed`
can admit a DM only for people the place rules admit somewhere.

The platform supplies the facts through a `Lookup`: the places among those the rules name
where it finds the person (Discord: each allowed server they are a member of, with their
roles there; Slack: each allowed channel they are a member of). It keeps what it looked up
in an `Expiring` cache, so a role removed or a channel left counts from the first DM after
the cache's time-to-live. A place the platform cannot ask about (an API error) counts as
not found there, and is not kept, so the next DM asks again: an outage refuses, never
admits.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from bot.conversations.access import AccessRules, Place

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

Lookup = Callable[[Place], Awaitable[Sequence[Place]]]
"""A DM's place -> the places (not DMs) the platform finds its sender in, among those the
rules name."""


class Expiring(Generic[K, V]):
    """At most `size` entries, each fresh for `ttl_s` seconds on `clock`; the oldest go
    first when full."""

    def __init__(
        self, ttl_s: float, size: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def fresh(self, key: K) -> V:
        """The value kept for `key`; KeyError when there is none or it is too old."""
        stored_at, value = self._entries[key]
        if self.clock() - stored_at >= self.ttl_s:
            del self._entries[key]
            raise KeyError(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._entries[key] = (self.clock(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class Presence:
    """Completes DM places with where their senders are, for one front end's rules."""

    def __init__(self, rules: AccessRules, lookup: Lookup, size: int = 10_000) -> None:
        self.rules = rules
        self.lookup = lookup
        self._known: OrderedDict[str, tuple[Place, ...]] = OrderedDict()
        self._size = size

    def needed(self, place: Place) -> bool:
        """Whether admitting this place depends on where its sender is."""
        rules = self.rules
        return (
            place.dm
            and rules.dms
            and rules.limits_places
            and place.user not in rules.dm_users
            and (not rules.users or place.user in rules.users)
        )

    async def place(self, place: Place) -> Place:
        """`place`, for a DM with where its sender is now (as fresh as the platform's cache)."""
        if not self.needed(place):
            return place
        found = tuple(await self.lookup(place))
        self._known[place.user] = found
        self._known.move_to_end(place.user)
        while len(self._known) > self._size:
            self._known.popitem(last=False)
        if not found:
            log.debug("%s is in no allowed place; their DM is refused", place.user)
        return dataclasses.replace(place, found_in=found)

    def known(self, place: Place) -> Place:
        """`place`, for a DM with where its sender was last found, without asking the
        platform (for callers that cannot wait; nothing known counts as nowhere)."""
        if not self.needed(place):
            return place
        return dataclasses.replace(place, found_in=self._known.get(place.user, ()))
