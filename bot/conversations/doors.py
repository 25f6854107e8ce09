"""The network doors of the conversation service: `/network`, the grants the egress proxy
asks for, the card shown when code hits a closed door, and the proxy's traffic on /usage.

    egress proxy ──> network_grants(key) ──> Grants (operator + channel + once)
    egress proxy refuses ──> door_closed(key, host, port) ──> a DoorCard, posted in the
        conversation's thread by its platform's doorbell: Allow once / Allow in this
        channel / Deny, for the channel's approvers (admins and moderators, as /policy)
    a press ──> answer_door ──> the grant recorded, and the code to run again (or nothing)
    egress proxy counts ──> network_traffic(key, host, port, verdict, ...) ──> /usage

`Doors` is a part of `Conversations` (its base class), over `Moderation`: who moderates is
decided there, once. While `CELLMATE_NETWORK` is off nothing here opens anything.
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.agent.turn import Turn
from bot.conversations.keys import ConversationKey
from bot.conversations.moderation import Moderation, pressed_in
from bot.conversations.network import NetworkCommand, NetworkGrants, Verdict
from bot.conversations.people import Admission, Person
from bot.errors import NotHere, Refused
from bot.events import CodeStarted, ExecutionFinished, TurnEvent
from bot.fences import runnable_again
from bot.text import human_size
from executor.network_grants import (
    Grants,
    HostPattern,
    PatternError,
    describe,
    normalize_host,
    parse_pattern,
)

log = logging.getLogger(__name__)

NETWORK_OFF = (
    "The network is off for sandboxes (CELLMATE_NETWORK=off): code here reaches no host, "
    "and /network opens nothing."
)
NETWORK_FOR_APPROVERS = "Only admins and moderators can open or close the network here."
NETWORK_USAGE = (
    "Use /network (what is open here), /network allow HOST[:PORT] [once|channel], "
    "or /network deny HOST."
)
NOTHING_OPEN = "Nothing is open to the network here: code reaches no host."
DOOR_GONE = "That request is no longer waiting: it was decided, or the bot restarted since."
DOOR_ELSEWHERE = "That request belongs to another conversation; it can only be decided there."
OPERATOR_HOST = (
    "{host} is opened by the operator (CELLMATE_NETWORK_ALLOWED) for every channel; only the "
    "operator can close it."
)
RUNS_REMEMBERED = 1000


class DoorChoice(enum.StrEnum):
    ONCE = "once"
    CHANNEL = "channel"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class DoorCard:
    """Code in `conversation` tried to reach `host:port`, which is closed there."""

    key: str
    """Names the card's buttons."""
    conversation: ConversationKey
    pattern: HostPattern
    """Exactly the host and port that were refused: what Allow opens."""
    run: str
    """The code that hit the door, run again after an Allow ('' when none is known)."""

    @property
    def door(self) -> str:
        (port,) = self.pattern.ports
        return f"{self.pattern.name}:{port}"

    @property
    def text(self) -> str:
        """What the card says, above its three buttons."""
        return (
            f"The code here tried to reach {self.door}, which is not open to this channel. "
            "An admin or moderator can allow it for the next run only, or in this channel "
            "until someone denies it"
            + (" (the code then runs again)" if self.run else "")
            + ", or keep it closed."
        )


@dataclass(frozen=True, slots=True)
class DoorAnswer:
    card: DoorCard
    choice: DoorChoice

    @property
    def rerun(self) -> str | None:
        """Code to run again in the card's conversation (None: nothing runs)."""
        return None if self.choice is DoorChoice.DENY else self.card.run or None

    def outcome(self, who: str) -> str:
        """The card's last line once decided; `who` names the person as the platform does."""
        door = self.card.door
        if self.choice is DoorChoice.DENY:
            return f"🚫 {door} stays closed (denied by {who})."
        where = "for the next run" if self.choice is DoorChoice.ONCE else "in this channel"
        again = "; the code runs again" if self.rerun else ""
        return f"✅ {door} allowed {where} by {who}{again}."


Doorbell = Callable[[DoorCard], Awaitable[None]]
"""A front end's way to post a card in a conversation's thread (or ask on the console)."""


class Doors(Moderation):
    network: NetworkGrants | None
    """Channel and one-run grants, and the traffic seen; None: the network stays off."""
    doorbells: dict[str, Doorbell]
    """Platform name -> how its front end posts a card."""
    door_cards: dict[str, DoorCard]
    """Cards waiting for an approver, by key."""
    last_runs: OrderedDict[str, str]
    """Conversation id -> the code it ran last, to run again after an Allow."""

    @property
    def network_on(self) -> bool:
        return self.network is not None and self.network.settings.on

    def network_grants(self, key: ConversationKey) -> Grants:
        """What the egress proxy lets the conversation `key` reach (nothing while off)."""
        if self.network is None:
            return Grants(key.id)
        return self.network.grants(key)

    async def network_command(
        self, door: Admission, person: Person, key: ConversationKey, command: NetworkCommand
    ) -> str:
        """/network on any platform: list for anyone; allow and deny for the channel's
        approvers. The answer for the person, a refusal included."""
        if not door.allows(person.place):
            raise NotHere
        if self.network is None or not self.network_on:
            return NETWORK_OFF
        if command.action == "list":
            grants = self.network.grants(key).grants
            return "\n".join(["Open here:", *map(describe, grants)]) if grants else NOTHING_OPEN
        if not await self.moderates(person):
            return NETWORK_FOR_APPROVERS
        try:
            pattern = self.network.parse(command.host)
        except PatternError as exc:
            return str(exc)
        if command.action == "allow":
            self.network.allow(key, pattern, command.once, person.user)
            log.info(
                "network: %s allowed %s in %s (once: %s)",
                person.user,
                pattern,
                key.id,
                command.once,
            )
            where = "for the next run here only" if command.once else "in this channel"
            return f"{pattern.name} (port {pattern.ports_text}) is now open {where}."
        if self.network.deny(key, pattern):
            log.info("network: %s denied %s in %s", person.user, pattern.name, key.id)
            return f"{pattern.name} is now closed here."
        if any(p.host == pattern.host for p in self.network.settings.operator):
            return OPERATOR_HOST.format(host=pattern.name)
        return f"{pattern.name} was not open here."

    async def door_closed(
        self, key: ConversationKey, host: str, port: int, run: str | None = None
    ) -> DoorCard | None:
        """The egress proxy refused `host:port` to the conversation `key`: post a card for
        its approvers (one a door while it waits). `run`: the code to run again after an
        Allow; by default the code the conversation ran last. None when no card is shown
        (the network is off, no grant could open it, or no front end can post it)."""
        if self.network is None or not self.network_on:
            return None
        try:
            pattern = self._door_pattern(host, port)
        except PatternError as exc:
            log.info("no card for a refused door in %s: %s", key.id, exc)
            return None
        for card in self.door_cards.values():
            if card.conversation == key and card.pattern == pattern:
                return card
        bell = self.doorbells.get(key.platform)
        if bell is None:
            log.warning("no front end posts network cards for %s", key.platform)
            return None
        code = self.last_runs.get(key.id, "") if run is None else run
        card = DoorCard(secrets.token_hex(8), key, pattern, code)
        self.door_cards[card.key] = card
        try:
            await bell(card)
        except Exception:
            self.door_cards.pop(card.key, None)
            raise
        return card

    async def answer_door(
        self, door: Admission, person: Person, card_key: str, choice: DoorChoice
    ) -> DoorAnswer:
        """An approver's press on a card: record the grant (Allow once, Allow in this
        channel) and say what runs again, or keep the door closed (Deny). Raises a
        `Refused` saying why the person may not."""
        if not door.allows(person.place):
            raise NotHere
        card = self.door_cards.get(card_key)
        if card is None or self.network is None:
            raise Refused(DOOR_GONE)
        if not pressed_in(person, card.conversation):
            raise Refused(DOOR_ELSEWHERE)
        if not await self.moderates(person):
            raise Refused(NETWORK_FOR_APPROVERS)
        if not self.network_on:
            raise Refused(NETWORK_OFF)
        if self.door_cards.pop(card_key, None) is None:
            raise Refused(DOOR_GONE)
        if choice is not DoorChoice.DENY:
            once = choice is DoorChoice.ONCE
            self.network.allow(card.conversation, card.pattern, once, person.user)
        log.info(
            "network: %s chose %s for %s in %s",
            person.user,
            choice,
            card.door,
            card.conversation.id,
        )
        return DoorAnswer(card, choice)

    def network_traffic(
        self,
        key: ConversationKey,
        host: str,
        port: int,
        verdict: Verdict,
        requests: int = 1,
        sent: int = 0,
    ) -> None:
        """The egress proxy's counts for a conversation (requests to host:port, bytes both
        ways, allowed or refused), for /usage."""
        if self.network is not None:
            self.network.record(key, host, port, verdict, requests, sent)

    def usage(self, server: str | None) -> str:
        """The day's heaviest users, and (with the network on) the day's traffic by host."""
        report = super().usage(server)
        if self.network is None or not self.network_on:
            return report
        seen = self.network.traffic(server)
        if not seen:
            return f"{report}\nNo network traffic in the last 24 hours."
        lines = ["Network, last 24 hours (host:port, verdict, requests, bytes):"]
        lines += [
            f"{t.host}:{t.port} {t.verdict}: {t.requests} requests, {human_size(t.bytes)}"
            for t in seen
        ]
        return "\n".join([report, *lines])

    # ── the runs of a turn ───────────────────────────────────────────────

    def watch_runs(
        self, key: ConversationKey, turn: Turn, emit: Callable[[TurnEvent], Awaitable[None] | None]
    ) -> Callable[[TurnEvent], Awaitable[None] | None]:
        """The turn's emit, which remembers each run's code (for a card's re-run) and uses up
        the one-run grants a run held when it ends; a run that starts (past its quota) takes
        the one-run grants given so far."""
        network = self.network
        if network is None or not network.settings.on:
            return emit
        checks = turn.allowance

        def allowance() -> None:
            if checks is not None:
                checks()
            network.begin_run(key)

        turn.allowance = allowance

        def watched(event: TurnEvent) -> Awaitable[None] | None:
            if isinstance(event, CodeStarted):
                self.last_runs[key.id] = runnable_again(event.code, event.language)
                self.last_runs.move_to_end(key.id)
                while len(self.last_runs) > RUNS_REMEMBERED:
                    self.last_runs.popitem(last=False)
            elif isinstance(event, ExecutionFinished):
                network.end_run(key)
            return emit(event)

        return watched

    def turn_over(self, key: ConversationKey) -> None:
        """A turn ended (perhaps stopped mid-run): no one-run grant outlives its run."""
        if self.network is not None and self.network.settings.on:
            self.network.end_run(key)

    def _door_pattern(self, host: str, port: int) -> HostPattern:
        assert self.network is not None
        name = normalize_host(host)
        shown = f"[{name}]" if ":" in name else name
        return parse_pattern(f"{shown}:{port}", self.network.settings.private)
