"""The conversation service: every front end's turns, stops, re-runs, resets, exports and file
lists go through here, so the rules are written once.

A front end translates a platform event into a call with a `Person` (who, from where, and
the platform's word on whether they moderate), a `ConversationKey` and a `Reply`, and renders
the reply's events. Admission (the platform's allowlist, quotas, draining), the one-turn-
at-a-time line of each person, the running turns, and who may act on a conversation are here;
decisions on waiting code, the code policy and usage are its `Moderation` part, and the
network's grants, cards and traffic its `Doors` part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.agent.turn import Turn
from bot.conversations.access import (
    Participants,
)
from bot.conversations.approval import (
    OFF_REFUSAL,
    Approver,
    Emit,
    Pending,
)
from bot.conversations.background import BackgroundRuns
from bot.conversations.doors import Doorbell, DoorCard, Doors
from bot.conversations.input_prompts import ELSEWHERE as INPUT_ELSEWHERE
from bot.conversations.input_prompts import (
    MAX_ANSWER_CHARS,
    NOT_YOURS,
    TOO_LONG,
    InputAsker,
    WaitingInput,
)
from bot.conversations.input_prompts import NOT_WAITING as INPUT_NOT_WAITING
from bot.conversations.keys import ConversationKey
from bot.conversations.mcp_tokens import McpDesk
from bot.conversations.moderation import pressed_in
from bot.conversations.network import NetworkGrants
from bot.conversations.people import Admission, Person
from bot.conversations.policy import Policies
from bot.conversations.quotas import Quotas
from bot.conversations.registry import SHUTDOWN_NOTICE, RerunSpec, Turns
from bot.conversations.reply import Reply
from bot.conversations.schedule_runs import Poster
from bot.conversations.schedules import NO_SCHEDULES, Scheduler
from bot.conversations.shared_events import SharedEvents
from bot.conversations.turn_leases import TurnLeases
from bot.errors import NOT_HERE, Draining, NotHere, NotYours, Refused
from bot.events import ExecutionFinished, TurnEvent
from bot.fences import direct_code
from bot.sandbox_words import restored
from bot.workspaces import workspace_person

if TYPE_CHECKING:
    from bot.agent import Agent, UserMessage

log = logging.getLogger(__name__)

ALREADY_FINISHED = "That has already finished."
ALREADY_IN_BACKGROUND = "That run is already going on in the background."
NO_BACKGROUND = "Runs cannot go on in the background here (CELLMATE_BACKGROUND_RUN_MAX_S is 0)."
NOTHING_TO_RUN_BESIDE = (
    "No run goes on in the background in this conversation: the code runs as it is."
)
FORGOTTEN_CODE = "I no longer have that code (the bot restarted since); use /run again."


@dataclass(frozen=True, slots=True)
class FileListing:
    files: list[tuple[str, int]]
    """(path, size) under /mnt/data."""
    saved: bool = False
    """The files of a saved workspace: no session is live, the next message restores them."""

    @property
    def heading(self) -> str:
        if not self.saved:
            return ""
        return "Saved workspace (it comes back with the next message here):"


class Conversations(Doors):
    def __init__(
        self,
        agent: Agent,
        admins: frozenset[str] = frozenset(),
        quotas: Quotas | None = None,
        policies: Policies | None = None,
        network: NetworkGrants | None = None,
        input_timeout_s: float = 120.0,
        background_max_s: float = 0.0,
        background_per_person: int = 2,
    ) -> None:
        self.agent = agent
        self.quotas = quotas
        """Limits on runs per person and server; usage is recorded from each run's end."""
        self.admins = admins
        """User ids (any platform) that moderate everywhere and may see /usage."""
        self.policies = policies
        """Each place's approval policy for the model's code; None: code always runs."""
        self.turns = Turns()
        self.participants = Participants()
        self.pending: dict[str, Pending] = {}
        """Code waiting for approval, by the key of its Run, Edit and Cancel controls."""
        self.network = network
        """Network grants and traffic; None (or CELLMATE_NETWORK=off): no network."""
        self.doorbells: dict[str, Doorbell] = {}
        self.door_cards: dict[str, DoorCard] = {}
        self.last_runs: OrderedDict[str, str] = OrderedDict()
        self.input_timeout_s = input_timeout_s
        self.inputs: dict[str, WaitingInput] = {}
        """The code's prompts waiting for an answer, by the key of their Answer control."""
        self.posters: dict[str, Poster] = {}
        """How each platform that is up posts a schedule's run, by platform name."""
        self.schedules: Scheduler | None = None
        """The schedules, where the bot keeps them (services set it)."""
        self.mcp: McpDesk | None = None
        """/mcp's tokens and the MCP endpoint's address, while it serves (CELLMATE_MCP)."""
        self.background = BackgroundRuns(self, background_max_s, background_per_person)
        """Runs that went on without their turn (0 s: runs end at their time limit)."""
        self.shared_events: SharedEvents | None = None
        """Where replicas share a database: the events any of them handled, so that a
        redelivered one is handled once (services set it; front ends' doors use it)."""
        self.leases: TurnLeases | None = None
        """Where replicas share a database: one turn at a time in a conversation across
        them (services set it)."""

    # ── turns ────────────────────────────────────────────────────────────

    async def turn(
        self,
        door: Admission,
        person: Person,
        key: ConversationKey,
        message: UserMessage,
        reply: Reply,
        *,
        rerun_code: str | None = None,
        quiet: bool = False,
        preapproved: bool = False,
    ) -> None:
        """One turn with its answer, or one message saying why it cannot run. `rerun_code`:
        a direct run, offered for Re-run. `quiet`: a place off the allowlist gets no answer
        (messages there are ignored; commands are told). `preapproved`: a schedule's run,
        whose code was approved when the schedule was made (policy off still stops it)."""
        try:
            self.admit(door, person, message.server)
            self._direct_run_allowed(key, message.text)
            with self.turns.running(key.id, person.user) as entry:
                self.participants.add(key.id, person.user)

                async def queued(text: str) -> None:
                    await reply.queued(entry.key, text)

                async with door.lines.turn(person.user, queued):
                    # An admin may have turned code off while this turn waited.
                    self._direct_run_allowed(key, message.text)
                    if rerun_code is not None:
                        conversation = None if key.is_one_off else key.id
                        spec = RerunSpec(rerun_code, conversation, message.server, person.user)
                        self.turns.remember(entry.key, spec)
                    # A schedule's run is posted as a whole, with what changed: it ends
                    # at its limit rather than go on in the background.
                    if not preapproved:
                        entry.turn.background = self.background.hooks(
                            key, person.user, message.server
                        )
                    await reply.start(entry.key)
                    emit = self._metered(reply, person.user, message.server, entry.turn)
                    self._keep_off(entry.turn, key, message.text)
                    emit = self.watch_runs(key, entry.turn, emit)
                    entry.turn.ask_input = InputAsker(
                        self.inputs,
                        key,
                        person.user,
                        emit,
                        entry.turn.stop_requested,
                        self.input_timeout_s,
                        lambda: self._approval_deadline(entry.turn),
                    )
                    approver = None
                    if self.policies is not None and not preapproved:
                        approver = entry.turn.approve = Approver(
                            self.policies,
                            self.pending,
                            key,
                            person.user,
                            emit,
                            entry.turn.stop_requested,
                            lambda: self._approval_deadline(entry.turn),
                            self.agent.executor.session(key.id).restorable,
                        )
                    async with self._leased(key, queued):
                        if approver is None:
                            await self.agent.turn(key.id, message, emit, entry.turn)
                        else:
                            await self.agent.turn(key.id, message, emit, entry.turn, approver)
                    notices = [SHUTDOWN_NOTICE] if entry.shutdown else []
                    await reply.finish(entry.key if rerun_code is not None else None, notices)
        except NotHere:
            if not quiet:
                await _safely(reply.refused(NOT_HERE))
        except Refused as exc:
            if self.agent.metrics is not None:
                self.agent.metrics.refused(type(exc).__name__)
            await _safely(reply.refused(str(exc)))
        except Exception as exc:
            log.exception("turn failed in %s", key.id)
            await _safely(reply.failed(f"Something went wrong while answering: {exc}"))
        finally:
            self.turn_over(key)
            # A one-off run's session ends with its turn, or with its run in the background.
            if key.is_one_off and not self.background.busy(key.id):
                await self.agent.reset(key.id)

    def _leased(
        self, key: ConversationKey, queued: Callable[[str], Awaitable[None]]
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """The conversation's lease among replicas; a one-off run's session is its own."""
        if self.leases is None or key.is_one_off:
            return contextlib.nullcontext()
        return self.leases.held(key.id, queued)

    def admit(self, door: Admission, person: Person, server: str) -> None:
        """The checks a turn passes before it may wait or start (the allowlist, quotas, not
        while shutting down); front ends that must answer at once ask before acknowledging.
        Raises a `Refused` whose message is for the person."""
        workspace_person.set(person.user)  # whose cap a workspace saved from here counts on
        if not door.allows(person.place):
            raise NotHere
        if not self.turns.admits():
            raise Draining
        if self.quotas is not None:
            self.quotas.check(person.user, server)

    def _approval_deadline(self, turn: Turn) -> float | None:
        """Waiting for approval counts toward the turn's time budget, from when that budget
        started: it ends early enough for the model to answer after a timeout (a fifth of
        the budget, at most 30 s)."""
        if turn.budget_started is None:
            return None
        budget = self.agent.limits.budget_s
        return turn.budget_started + budget - min(30.0, budget / 5)

    def _direct_run_allowed(self, key: ConversationKey, text: str) -> None:
        """Direct runs are their author's own decision, except where no code may run."""
        if self.policies is None or direct_code(text) is None:
            return
        if self.policies.mode(key) == "off":
            raise Refused(OFF_REFUSAL)

    def _keep_off(self, turn: Turn, key: ConversationKey, text: str) -> None:
        """A direct run checks the policy again as it starts: the turn may have waited for
        the conversation while an admin turned code off."""
        if self.policies is None:
            return
        quota = turn.allowance

        def allowance() -> None:
            self._direct_run_allowed(key, text)
            if quota is not None:
                quota()

        turn.allowance = allowance

    def _metered(
        self, reply: Reply, user: str, server: str, turn: Turn
    ) -> Callable[[TurnEvent], Awaitable[None] | None]:
        """The reply, with each run checked against the quotas before it starts (a turn may
        run code several times) and its sandbox time recorded when it ends."""
        quotas = self.quotas
        if quotas is None:
            return reply
        turn.allowance = lambda: quotas.check(user, server)

        def emit(event: TurnEvent) -> Awaitable[None] | None:
            if isinstance(event, ExecutionFinished):
                quotas.record(user, server, event.duration_ms / 1000)
            return reply(event)

        return emit

    # ── acting on a conversation ─────────────────────────────────────────

    async def may_act(self, person: Person, key: ConversationKey | None, owner: str = "") -> bool:
        """Whether `person` may act on `key` (read its files, export, reset, stop or re-run):
        its participants, the `owner` of a one-off run, the person of a DM, and moderators."""
        if person.user == owner or person.user in self.admins:
            return True
        if key is not None and (
            (key.is_dm and key.channel == person.user)
            or self.participants.includes(key.id, person.user)
        ):
            return True
        if person.vouched is not None and await person.vouched():
            if key is not None:
                self.participants.add(key.id, person.user)
            return True
        return False

    async def check(
        self, door: Admission, person: Person, key: ConversationKey | None, owner: str = ""
    ) -> None:
        """Raise NotHere or NotYours unless `person` may act on `key` from where they are."""
        workspace_person.set(person.user)
        if not door.allows(person.place):
            raise NotHere
        if not await self.may_act(person, key, owner):
            raise NotYours

    async def stop(self, door: Admission, person: Person, stop_key: str) -> str | None:
        """Stop a running or queued turn; None when stopped, else why not, for the person."""
        if not door.allows(person.place):
            raise NotHere
        running = self.turns.get(stop_key)
        if running is None:
            gone = self.background.get(stop_key)
            if gone is None:
                return ALREADY_FINISHED
            await self.check(door, person, gone.key, gone.owner)
            self.background.stop(stop_key)
            return None
        await self.check(
            door, person, ConversationKey.parse(running.turn.conversation), running.owner
        )
        running.turn.stop()
        return None

    async def keep_running(self, door: Admission, person: Person, stop_key: str) -> str | None:
        """Keep running: the turn's run goes on in the background instead of ending at its
        time limit. None when it does, else why not, for the person."""
        if not door.allows(person.place):
            raise NotHere
        if self.background.get(stop_key) is not None:
            return ALREADY_IN_BACKGROUND
        running = self.turns.get(stop_key)
        if running is None:
            return ALREADY_FINISHED
        key = ConversationKey.parse(running.turn.conversation)
        await self.check(door, person, key, running.owner)
        hooks = running.turn.background
        if hooks is None:
            return NO_BACKGROUND
        why = hooks.refusal()
        if why is not None:
            return why
        hooks.keep_running.set()
        return None

    async def run_beside(self, door: Admission, person: Person, stop_key: str) -> str | None:
        """Run beside: the turn's code that waits for a run in the background runs in a
        second kernel beside it instead. None when it does, else why not, for the person."""
        if not door.allows(person.place):
            raise NotHere
        running = self.turns.get(stop_key)
        if running is None:
            return ALREADY_FINISHED
        key = ConversationKey.parse(running.turn.conversation)
        await self.check(door, person, key, running.owner)
        if not self.background.busy(key.id):
            return NOTHING_TO_RUN_BESIDE
        running.turn.beside.set()
        return None

    async def rerun(
        self, door: Admission, person: Person, rerun_key: str
    ) -> tuple[str, ConversationKey | None]:
        """The code of a finished direct run and the conversation it ran in (None: a one-off
        run), for a person who may run it again."""
        if not door.allows(person.place):
            raise NotHere
        spec = self.turns.rerun(rerun_key)
        if spec is None:
            raise Refused(FORGOTTEN_CODE)
        key = None if spec.conversation is None else ConversationKey.parse(spec.conversation)
        await self.check(door, person, key, spec.owner)
        return spec.code, key

    def post_with(self, platform: str, poster: Poster) -> None:
        """A platform that is up says how it posts schedules' runs; those due run now, and
        background runs an earlier process left going there are followed again."""
        self.posters[platform] = poster
        if self.schedules is not None:
            self.schedules.wake()
        self.background.follow_stored(platform)

    async def schedule_command(
        self, door: Admission, person: Person, key: ConversationKey, text: str
    ) -> str:
        """/schedule on any platform (see bot.conversations.schedules): the answer."""
        if not door.allows(person.place):
            raise NotHere
        if self.schedules is None:
            return NO_SCHEDULES
        return await self.schedules.command(door, person, key, text)

    def answerable(self, door: Admission, person: Person, key: str) -> WaitingInput:
        """The code's prompt waiting under `key`, for the person who may answer it (whose
        turn it is); raises a `Refused` saying why not."""
        if not door.allows(person.place):
            raise NotHere
        waiting = self.inputs.get(key)
        if waiting is None or waiting.answer.done():
            raise Refused(INPUT_NOT_WAITING)
        if not pressed_in(person, waiting.conversation):
            raise Refused(INPUT_ELSEWHERE)
        if person.user != waiting.person:
            raise Refused(NOT_YOURS)
        return waiting

    async def answer_input(
        self, door: Admission, person: Person, key: str, answer: str | None
    ) -> None:
        """Give `answer` to the code's prompt waiting under `key` (None: the person gives
        none, and the code gets EOFError now); raises a `Refused` saying why the person may
        not (only the person whose turn it is may answer)."""
        waiting = self.answerable(door, person, key)
        if answer is not None and len(answer) > MAX_ANSWER_CHARS:
            raise Refused(TOO_LONG.format(limit=MAX_ANSWER_CHARS))
        if not waiting.settle(None if answer is None else (answer, person.user)):
            raise Refused(INPUT_NOT_WAITING)
        # Never the answer itself: a getpass() one is a secret.
        log.info("the code's prompt in %s was answered", waiting.conversation.id)

    async def reset(self, door: Admission, person: Person, key: ConversationKey) -> None:
        await self.check(door, person, key)
        await self.agent.reset(key.id)

    async def restore(
        self, door: Admission, person: Person, key: ConversationKey, ask: Emit | None = None
    ) -> str:
        """Bring the conversation's saved workspace back into its session (at most once per
        session); what came back. Its variables pass the place's policy as a run does: under
        off only the files come back; under approve a card on `ask` names them and waits for
        a person (without `ask`, only the files come back, and the next code's card names
        the variables)."""
        await self.check(door, person, key)
        session = self.agent.executor.session(key.id)
        if self.policies is None:
            return restored(await session.restore())
        approver = Approver(
            self.policies,
            self.pending,
            key,
            person.user,
            ask or (lambda event: None),
            asyncio.Event(),
            restorable=session.restorable,
        )
        mode, why = approver.unasked()
        if ask is not None:
            mode = await approver.restore(by_run=False)
        done = await session.restore(mode)
        return f"{why} {restored(done)}" if done.withheld and why else restored(done)

    async def export(self, door: Admission, person: Person, key: ConversationKey) -> Any:
        """The conversation's session as a notebook, or None when no code has run."""
        await self.check(door, person, key)
        return await self.agent.executor.session(key.id).export_notebook()

    async def files(self, door: Admission, person: Person, key: ConversationKey) -> FileListing:
        """The files in the conversation's /mnt/data, with their sizes; between sessions,
        those of its saved workspace."""
        await self.check(door, person, key)
        session = self.agent.executor.session(key.id)
        if session.active:
            return FileListing(await session.list_files())
        saved = await session.saved_files()
        return FileListing(saved or [], saved=saved is not None)


async def _safely(telling: Awaitable[None]) -> None:
    try:
        await telling
    except Exception:
        log.exception("could not tell the person why their message got no answer")
