"""Direct messages on Discord are answered only for people the server, channel and role
allowlists admit somewhere (or the DM allowlist names): the real discord.py client against
the Discord test server, on the fake sandbox (no Docker)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl

from bench.standins.discord_server import (
    ALICE,
    CAROL,
    CHANNEL_GENERAL,
    DAVE,
    GUILD_ID,
    OTHER_GUILD,
    OTHER_ROLE,
    ROLE_MEMBER,
    TOKEN,
    DiscordServer,
    Interaction,
    Message,
)
from bench.standins.openai_server import ScriptedModel
from bot.agent import Agent
from bot.conversations import Conversations
from bot.errors import NOT_HERE
from bot.platforms.on_discord import build_client, run_discord
from bot.settings import DiscordSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.on_discord import Bot, button_id, has_button, interaction_reply

STRANGER = 1100000000000000999  # in no server the bot knows
WHO = {ALICE: "alice", CAROL: "carol", DAVE: "dave", STRANGER: "stranger"}
"""Alice: in the allowed server with the allowed role; Carol: in it without a role; Dave: in
another server, holding a role named like the allowed one; a stranger: in no server."""


def _code(user: int, how: str) -> str:
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
            for how in ("dm", "run", "cached", "again")
        }
    )


@dataclasses.dataclass
class Clock:
    """A clock the test moves, for the membership cache."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def start_bot(
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    started: list[tuple[DiscordServer, Any, asyncio.Task[None]]] = []
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

    async def start(**settings: Any) -> Bot:
        server = DiscordServer(other_guild=True)
        await server.start()
        agent = make_agent(fake_executor, None, tmp_path, timeout=5)
        chosen = DiscordSettings(token=TOKEN, api_url=server.api_url, cooldown_s=0)
        client = build_client(Conversations(agent), dataclasses.replace(chosen, **settings))
        client._connection.guild_ready_timeout = 0.05
        task = asyncio.create_task(run_discord(client))
        started.append((server, client, task))
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 10)
        return Bot(server, client, agent)

    yield start
    for server, client, task in started:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        await server.close()
    discord.http.Route.BASE = base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


async def _dm(bot: Bot, user: int, how: str = "dm") -> int:
    """`user` sends code by DM; the DM channel's id."""
    dm = await bot.server.dm_channel(user)
    await bot.server.post_message(dm, f"```py\n{_code(user, how)}\n```", author=user)
    return dm


async def _run_result(bot: Bot, interaction: Interaction, text: str) -> Message:
    """The finished /run result that shows `text`."""
    found = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in bot.server.interaction_messages(interaction)
                if text in m.content and has_button(m, "Re-run")
            ),
            None,
        )
    )
    assert isinstance(found, Message)
    return found


async def _admitted(bot: Bot, user: int) -> None:
    """`user`'s DM and their /run in it both run."""
    dm = await _dm(bot, user)
    (answer,) = await bot.answer_in(dm)
    assert f"{WHO[user]} dm ran" in answer.content
    ran = await bot.server.slash("run", {"code": _code(user, "run")}, channel_id=dm, user=user)
    await _run_result(bot, ran, f"{WHO[user]} run ran")


async def _refused(bot: Bot, user: int, fake_backend: FakeBackend) -> None:
    """`user`'s DM is ignored silently, as a message in a channel off the allowlist is;
    /run in the DM (with code, and the editor) and /files say it is not enabled here; none
    of their code runs."""
    dm = await _dm(bot, user)
    commands = [
        await bot.server.slash("run", {"code": _code(user, "run")}, channel_id=dm, user=user),
        await bot.server.slash("run", channel_id=dm, user=user),
        await bot.server.slash("files", channel_id=dm, user=user),
    ]
    for interaction in commands:
        assert await interaction_reply(bot, interaction) == NOT_HERE
    await bot.server.wait_for(lambda: not bot.client.conversations.turns)
    assert bot.bot_messages(dm) == []
    assert not any(WHO[user] in code for code in fake_backend.runs)


RULES: dict[str, dict[str, Any]] = {
    "server and role": dict(guilds=(str(GUILD_ID),), roles=(str(ROLE_MEMBER),)),
    "role only": dict(roles=(str(ROLE_MEMBER),)),
    "server only": dict(guilds=(str(GUILD_ID),)),
    "channel only": dict(channels=(str(CHANNEL_GENERAL),)),
}
ADMITTED = {
    "server and role": [ALICE],
    "role only": [ALICE],
    "server only": [ALICE, CAROL],
    "channel only": [ALICE, CAROL],  # both see #general
}


@pytest.mark.parametrize("rules", list(RULES))
async def test_a_dm_is_answered_only_for_people_the_allowlists_admit_in_a_server(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend, rules: str
) -> None:
    bot = await start_bot(**RULES[rules])
    for user in WHO:
        if user in ADMITTED[rules]:
            await _admitted(bot, user)
        else:
            await _refused(bot, user, fake_backend)
    # Dave's role is named like the allowed one, in a server the bot is in too.
    other = bot.client.get_guild(OTHER_GUILD)
    assert other is not None
    names = {role.id: role.name for role in other.roles}
    assert names[OTHER_ROLE] == bot.client.get_guild(GUILD_ID).get_role(ROLE_MEMBER).name  # type: ignore[union-attr]


async def test_the_dm_allowlist_admits_people_in_no_allowed_server(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(
        guilds=(str(GUILD_ID),), roles=(str(ROLE_MEMBER),), dm_users=(str(STRANGER),)
    )
    await _admitted(bot, STRANGER)
    await _admitted(bot, ALICE)
    await _refused(bot, CAROL, fake_backend)
    # Nobody's membership was looked up for the listed person.
    assert not any(str(STRANGER) in path for _, path in bot.server.requests)


async def test_dms_turned_off_refuse_everyone(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(dms=False, dm_users=(str(ALICE),), roles=(str(ROLE_MEMBER),))
    await _refused(bot, ALICE, fake_backend)
    await _refused(bot, DAVE, fake_backend)


async def test_a_removed_role_refuses_the_next_dm_once_the_membership_is_looked_up_again(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(guilds=(str(GUILD_ID),), roles=(str(ROLE_MEMBER),), membership_ttl_s=60)
    clock = Clock()
    bot.client.members.clock = clock
    dm = await _dm(bot, ALICE)
    await bot.answer_in(dm)
    ran = await bot.server.slash("run", {"code": _code(ALICE, "run")}, channel_id=dm)
    result = await _run_result(bot, ran, "alice run ran")

    lookups = _member_lookups(bot, ALICE)
    bot.server.guild_members[GUILD_ID][ALICE] = ()  # a moderator takes the role away
    clock.now += 30  # within the time the membership is trusted: not asked again
    await _dm(bot, ALICE, "cached")
    await bot.server.wait_for(
        lambda: any("alice cached ran" in m.content for m in bot.bot_messages(dm))
    )
    assert _member_lookups(bot, ALICE) == lookups == 1

    clock.now += 31
    again = await _dm(bot, ALICE, "again")
    rerun = await bot.server.click(result, button_id(result, "Re-run"))
    assert await interaction_reply(bot, rerun) == NOT_HERE
    denied = await bot.server.slash("run", {"code": _code(ALICE, "again")}, channel_id=dm)
    assert await interaction_reply(bot, denied) == NOT_HERE
    await bot.server.wait_for(lambda: not bot.client.conversations.turns)
    assert not any("alice again" in code for code in fake_backend.runs)
    assert fake_backend.runs.count(_code(ALICE, "run")) == 1  # Re-run ran nothing
    assert [m for m in bot.bot_messages(again) if "alice again" in m.content] == []
    assert _member_lookups(bot, ALICE) > lookups


def _member_lookups(bot: Bot, user: int) -> int:
    return bot.server.requests.count(("GET", f"/guilds/{GUILD_ID}/members/{user}"))
