"""The conversation service: every front end's turns, stops, re-runs, resets, exports and file
lists go through here, so the rules are written once.

A front end translates a platform event into a call with a `Person` (who, from where, and
the platform's word on whether they moderate), a `ConversationKey` and a `Reply`, and renders
the reply's events. Admission (the platform's allowlist, quotas, draining), the one-turn-
at-a-time line of each person, the running turns, and who may act on a conversation are here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.conversations.access import NOT_HERE, Participants, Refused
from bot.conversations.approval import (
    ALREADY_DECIDED,
    NOTHING_TO_EDIT,
    OFF_REFUSAL,
    Approver,
    Decision,
    Emit,
    Pending,
    Verdict,
)
from bot.conversations.keys import ConversationKey
from bot.conversations.people import Admission, NotHere, NotYours, Person
from bot.conversations.policy import Mode, Policies, Scope, described, now_set
from bot.conversations.quotas import Quotas
from bot.conversations.registry import SHUTDOWN_NOTICE, Draining, RerunSpec, Turn, Turns
from bot.conversations.reply import Reply
from bot.events import ExecutionFinished, TurnEvent
from bot.fences import as_run
from bot.workspaces import workspace_person

if TYPE_CHECKING:
    from bot.agent import Agent, UserMessage

log = logging.getLogger(__name__)

ALREADY_FINISHED = "That has already finished."
FORGOTTEN_CODE = "I no longer have that code (the bot restarted since); use /run again."
NOT_APPROVER = {
    "requester": "Only the person who asked, or a moderator, can decide on this code.",
    "moderators": "Only a moderator can decide on this code.",
}
ELSEWHERE = "That code waits in another conversation; it can only be decided there."
POLICY_FOR_ADMINS = "Only admins and moderators can change the code policy."
NO_POLICIES = "Code policies are not kept by this bot."
NO_SERVER = "A direct message has no server: leave out the scope."
EMPTY_EDIT = "The edited code is empty, so nothing was decided; the code still waits."
USAGE_FOR_ADMINS = "Only admins can see usage."
NO_USAGE = "Usage is not recorded: no quotas are configured (CELLMATE_QUOTA_*)."


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


class Conversations:
    def __init__(
        self,
        agent: Agent,
        admins: frozenset[str] = frozenset(),
        quotas: Quotas | None = None,
        policies: Policies | None = None,
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
    ) -> None:
        """One turn with its answer, or one message saying why it cannot run. `rerun_code`:
        a direct run, offered for Re-run. `quiet`: a place off the allowlist gets no answer
        (messages there are ignored; commands are told)."""
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
                    await reply.start(entry.key)
                    emit = self._metered(reply, person.user, message.server, entry.turn)
                    self._keep_off(entry.turn, key, message.text)
                    approver = None
                    if self.policies is not None:
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
            if key.is_one_off:  # a one-off run's session ends with its turn
                await self.agent.reset(key.id)

    def admit(self, door: Admission, person: Person, server: str) -> None:
        """The checks a turn passes before it may wait or start (the allowlist, quotas, not
        while shutting down); front ends that must answer at once ask before acknowledging.
        Raises a `Refused` whose message is for the person."""
        workspace_person.set(person.user)  # whose cap a workspace saved from here counts on
        if not door.allows(person.place):
            raise NotHere
        if not self.turns.accepting:
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
        from bot.agent import direct_code  # the agent imports this package

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
            return ALREADY_FINISHED
        await self.check(
            door, person, ConversationKey.parse(running.turn.conversation), running.owner
        )
        running.turn.stop()
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
            return (await session.restore()).note
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
        return f"{why} {done.note}" if done.withheld and why else done.note

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

    # ── approvals and the code policy ────────────────────────────────────

    async def moderates(self, person: Person) -> bool:
        """Configured admins, and whom the platform calls a moderator here."""
        if person.user in self.admins:
            return True
        return person.moderates is not None and await person.moderates()

    async def approvable(self, door: Admission, person: Person, key: str) -> Pending:
        """The code waiting under `key`, for a person who may decide on it; raises a
        `Refused` saying why not."""
        if not door.allows(person.place):
            raise NotHere
        waiting = self.pending.get(key)
        if waiting is None or waiting.decided.done():
            raise Refused(ALREADY_DECIDED)
        if not _pressed_in(person, waiting.conversation):
            raise Refused(ELSEWHERE)
        approvers = self.policies.settings.approvers if self.policies else "requester"
        if approvers == "requester" and person.user == waiting.requester:
            return waiting
        if await self.moderates(person):
            return waiting
        raise Refused(NOT_APPROVER[approvers])

    async def decide(
        self, door: Admission, person: Person, key: str, verdict: Verdict, code: str = ""
    ) -> None:
        """Run (RUN), run edited `code` (EDITED) or not run (CANCELLED) the code waiting under
        `key`; raises a `Refused` saying why the person may not."""
        waiting = await self.approvable(door, person, key)
        if verdict is Verdict.EDITED and not waiting.code:
            raise Refused(NOTHING_TO_EDIT)
        if verdict is Verdict.EDITED and not code.strip():
            raise Refused(EMPTY_EDIT)
        # What runs is what the reply then shows: line ends and hidden characters as the
        # model's code gets them.
        code = as_run(code)
        if verdict is not Verdict.EDITED:
            code = waiting.code
        if not waiting.settle(Decision(verdict, code, person.user)):
            raise Refused(ALREADY_DECIDED)
        log.info("code in %s: %s by %s", waiting.conversation.id, verdict.value, person.user)

    def policy(self, key: ConversationKey) -> str:
        """The code policy that applies to a conversation, for anyone to read."""
        if self.policies is None:
            return NO_POLICIES
        return described(self.policies.effective(key))

    async def set_policy(self, door: Admission, person: Person, scope: Scope, mode: Mode) -> str:
        """Set the policy of a channel (or DM) or a workspace, for admins and moderators."""
        if not door.allows(person.place):
            raise NotHere
        if self.policies is None:
            raise Refused(NO_POLICIES)
        if not await self.moderates(person):
            raise Refused(POLICY_FOR_ADMINS)
        self.policies.set(scope, mode, person.user)
        log.info("code policy of %s set to %s by %s", scope, mode, person.user)
        return now_set(scope, mode)

    async def policy_command(
        self,
        door: Admission,
        person: Person,
        key: ConversationKey,
        mode: Mode | None,
        whole: bool = False,
    ) -> str:
        """/policy on any platform: without a `mode`, the policy of the place `key` names;
        with one, set it for its channel (or DM), or its whole server (`whole`). The answer
        for the person, a refusal included."""
        if mode is None:
            return self.policy(key)
        if whole and key.is_dm:
            return NO_SERVER
        where = Scope.workspace_of(key) if whole else Scope.channel_of(key)
        try:
            return await self.set_policy(door, person, where, mode)
        except Refused as exc:
            return str(exc)

    def usage(self, server: str | None) -> str:
        """The day's heaviest users (of one server, or of all)."""
        if self.quotas is None:
            return NO_USAGE
        return self.quotas.report(server)

    async def usage_for(self, door: Admission, person: Person, server: str | None) -> str:
        """/usage on any platform: the day's heaviest users, for configured admins and whom
        the platform calls a moderator (of the whole server); raises a `Refused` saying why
        not for anyone else."""
        if not door.allows(person.place):
            raise NotHere
        if not await self.moderates(person):
            raise Refused(USAGE_FOR_ADMINS)
        return self.usage(server)


def _pressed_in(person: Person, key: ConversationKey) -> bool:
    """Whether a press comes from the conversation `key` (its server and channel; a DM's own
    person), so that a decision key seen in one place decides nothing in another."""
    if key.is_dm:
        return person.user == key.channel
    place = person.place
    return (place.server or "") == key.workspace and (place.channel or "") == key.channel


async def _safely(telling: Awaitable[None]) -> None:
    try:
        await telling
    except Exception:
        log.exception("could not tell the person why their message got no answer")
