"""The approvals and the code policy of the conversation service, and who sees usage: the
rules that ask whether a person moderates here (a configured admin, or whom the platform
calls a moderator).

`Moderation` is a part of `Conversations` (its base class): the service's state it uses
is declared here, and set by the service.
"""

from __future__ import annotations

import logging

from bot.conversations.approval import ALREADY_DECIDED, NOTHING_TO_EDIT, Decision, Pending, Verdict
from bot.conversations.keys import ConversationKey
from bot.conversations.people import Admission, Person
from bot.conversations.policy import Mode, Policies, Scope, described, now_set
from bot.conversations.quotas import Quotas
from bot.errors import NotHere, Refused
from bot.fences import as_run

log = logging.getLogger(__name__)

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


class Moderation:
    admins: frozenset[str]
    """User ids (any platform) that moderate everywhere and may see /usage."""
    policies: Policies | None
    """Each place's approval policy for the model's code; None: code always runs."""
    quotas: Quotas | None
    pending: dict[str, Pending]
    """Code waiting for approval, by the key of its Run, Edit and Cancel controls."""

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
        if not pressed_in(person, waiting.conversation):
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


def pressed_in(person: Person, key: ConversationKey) -> bool:
    """Whether a press comes from the conversation `key` (its server and channel; a DM's own
    person), so that a decision key seen in one place decides nothing in another."""
    if key.is_dm:
        return person.user == key.channel
    place = person.place
    return (place.server or "") == key.workspace and (place.channel or "") == key.channel
