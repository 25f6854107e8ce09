"""Direct messages on Slack, and commands, shortcuts and buttons used in them, are answered
only for members of an allowed channel (or people the DM allowlist names): the real
slack_bolt app against the Slack test server, on the fake sandbox (no Docker)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bench.standins.slack_server import ADMIN, ALICE, BOB, C_GENERAL, C_OTHER, TEAM_ID, Message
from bot.errors import NOT_HERE
from executor import SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.fast.test_slack_turns import mode, start_bot
from tests.support.on_slack import Bot, button, ephemeral_to

__all__ = ["mode", "start_bot"]

STRANGER = "U0STRANGER"  # in no channel
WHO = {ALICE: "alice", ADMIN: "admin", BOB: "bob", STRANGER: "stranger"}
"""Alice and the admin are in #general; Bob only in #other; a stranger in neither."""


def _code(user: str, how: str) -> str:
    return f"print('{WHO[user]} {how}')"


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            _code(user, how): FakeRun(outputs=[stdout(f"{WHO[user]} {how} ran\n")])
            for user in WHO
            for how in ("dm", "run", "shortcut", "cached", "again")
        }
    )


@dataclasses.dataclass
class Clock:
    """A clock the test moves, for the channel members cache."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


async def _dm(bot: Bot, user: str, how: str = "dm") -> Message:
    """`user` sends code by DM; their message."""
    asked, _ = await bot.server.post(
        bot.server.dm_channel(user), f"```\n{_code(user, how)}\n```", user=user
    )
    return asked


async def _ran(bot: Bot, channel: str, text: str) -> Message:
    """The bot's finished message in `channel` that shows `text`."""
    found = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.channel_messages(channel, by_bot=True)
                if text in m.text and button(m, "cm_rerun")
            ),
            None,
        )
    )
    assert isinstance(found, Message)
    return found


async def _admitted(bot: Bot, user: str) -> None:
    """`user`'s DM, /run from the DM and the Run code shortcut there all run."""
    dm = bot.server.dm_channel(user)
    asked = await _dm(bot, user)
    await _ran(bot, dm, f"{WHO[user]} dm ran")
    await bot.server.slash("/run", _code(user, "run"), channel=dm, user=user)
    await _ran(bot, dm, f"{WHO[user]} run ran")
    await bot.server.wait_for(lambda: not bot.slack.conversations.turns)
    await bot.server.shortcut("cm_run_code", asked, user=user)
    await bot.server.wait_for(
        lambda: sum(f"{WHO[user]} dm ran" in m.text for m in bot.server.channel_messages(dm)) == 2
    )


async def _refused(bot: Bot, user: str, fake_backend: FakeBackend) -> None:
    """`user`'s DM is ignored silently, as a message in a channel off the allowlist is;
    slash commands and the shortcut in the DM say it is not enabled here; none of their
    code runs."""
    dm = bot.server.dm_channel(user)
    asked = await _dm(bot, user)
    told_before = len(ephemeral_to(bot, user))
    await bot.server.slash("/run", _code(user, "run"), channel=dm, user=user)
    await bot.server.slash("/run", "", channel=dm, user=user)
    await bot.server.slash("/files", "", channel=dm, user=user)
    await bot.server.slash("/policy", "off", channel=dm, user=user)
    await bot.server.shortcut("cm_run_code", asked, user=user)
    assert await interaction_reply(bot, user, 5, told_before) == [NOT_HERE] * 5
    assert bot.server.views == []  # no /run editor was opened
    await bot.server.wait_for(lambda: not bot.slack.conversations.turns)
    assert bot.server.channel_messages(dm, by_bot=True) == []
    assert not any(WHO[user] in code for code in fake_backend.runs)


RULES: dict[str, dict[str, Any]] = {
    "channel": dict(channels=(C_GENERAL,)),
    "team and channel": dict(teams=(TEAM_ID,), channels=(C_GENERAL,)),
    "two channels": dict(channels=(C_GENERAL, C_OTHER)),
    "another team": dict(teams=("T0ELSEWHERE",)),
}
ADMITTED = {
    "channel": [ALICE, ADMIN],
    "team and channel": [ALICE, ADMIN],
    "two channels": [ALICE, ADMIN, BOB],
    "another team": [],
}


@pytest.mark.parametrize("rules", list(RULES))
async def test_a_dm_is_answered_only_for_members_of_an_allowed_channel(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend, rules: str
) -> None:
    bot = await start_bot(use_model=False, **RULES[rules])
    for user in WHO:
        if user in ADMITTED[rules]:
            await _admitted(bot, user)
        else:
            await _refused(bot, user, fake_backend)


async def test_the_dm_allowlist_admits_people_in_no_allowed_channel(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False, channels=(C_GENERAL,), dm_users=(STRANGER,))
    await _admitted(bot, STRANGER)
    await _refused(bot, BOB, fake_backend)


async def test_dms_turned_off_refuse_everyone(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False, dms=False, channels=(C_GENERAL,), dm_users=(ALICE,))
    await _refused(bot, ALICE, fake_backend)
    await _refused(bot, BOB, fake_backend)


async def test_leaving_the_channel_refuses_the_next_dm_once_members_are_looked_up_again(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False, channels=(C_GENERAL,), membership_ttl_s=60)
    clock = Clock()
    bot.slack.members.clock = clock
    dm = bot.server.dm_channel(ALICE)
    await _dm(bot, ALICE)
    result = await _ran(bot, dm, "alice dm ran")
    lookups = _member_lookups(bot)

    bot.server.members[C_GENERAL].remove(ALICE)  # Alice leaves #general
    clock.now += 30  # within the time the member list is trusted: not asked again
    await _dm(bot, ALICE, "cached")
    await _ran(bot, dm, "alice cached ran")
    assert _member_lookups(bot) == lookups == 1

    clock.now += 31
    await _dm(bot, ALICE, "again")
    await bot.server.click(result, "cm_rerun")
    await bot.server.slash("/run", _code(ALICE, "again"), channel=dm)
    assert await interaction_reply(bot, ALICE, 2) == [NOT_HERE] * 2
    await bot.server.wait_for(lambda: not bot.slack.conversations.turns)
    assert not any("alice again" in code for code in fake_backend.runs)
    assert sum("alice dm" in code for code in fake_backend.runs) == 1  # Re-run ran nothing
    assert _member_lookups(bot) > lookups


async def interaction_reply(bot: Bot, user: str, count: int, skip: int = 0) -> list[str]:
    """The next `count` things only `user` was shown, after the first `skip`."""

    def shown() -> list[str] | None:
        texts = ephemeral_to(bot, user)[skip:]
        return texts if len(texts) >= count else None

    return await bot.server.wait_for(shown)  # type: ignore[return-value]


def _member_lookups(bot: Bot) -> int:
    return sum(1 for method, _ in bot.server.calls if method == "conversations.members")
