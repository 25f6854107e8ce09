"""The bot's Discord gateway split into shards, one per replica: two bots (each its own
Conversations, agent and fake sandbox, like two replicas of a StatefulSet) identify as
shards 0 and 1 of 2 on the stand-in Discord, which routes each server's events to shard
(server id >> 22) % 2 and DMs to shard 0, as Discord does. A mention in the server is
answered once, by the replica of its shard; a DM once, by shard 0's; only shard 0 registers
the commands. And the shard a replica takes: a number, or its StatefulSet ordinal."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import unittest.mock
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import discord
import pytest
import yarl

from bench.standins.discord_server import (
    ALICE,
    CHANNEL_GENERAL,
    GUILD_ID,
    TOKEN,
    DiscordServer,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.ops.front_ends import check_discord
from bot.platforms.on_discord import build_client, run_discord
from bot.settings import DiscordSettings, Settings
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.on_discord import Bot

CODE = "```py\nprint(6 * 7)\n```"
SHARDS = 2
MakeReplica = Callable[[int], Awaitable[Bot]]


@pytest.fixture
async def server() -> AsyncIterator[DiscordServer]:
    made = DiscordServer()
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def replicas(
    server: DiscordServer,
    sandbox_limits: SandboxLimits,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[MakeReplica]:
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    async with contextlib.AsyncExitStack() as stack:

        async def make(shard: int) -> Bot:
            backend = FakeBackend(
                {"print(6 * 7)": FakeRun(outputs=[stdout(f"42 from shard {shard}\n")])}
            )
            executor = await stack.enter_async_context(
                Executor("fake", limits=sandbox_limits, backend=backend, pool=PoolSettings(size=0))
            )
            agent = make_agent(executor, None, tmp_path / f"shard-{shard}")
            settings = DiscordSettings(
                token=TOKEN,
                api_url=server.api_url,
                cooldown_s=0,
                shard_count=SHARDS,
                shard_id=str(shard),
            )
            client = build_client(Conversations(agent), settings)
            client._connection.guild_ready_timeout = 0.05
            task = asyncio.create_task(run_discord(client))

            async def stop() -> None:
                await client.close()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 10)

            stack.push_async_callback(stop)
            return Bot(server, client, agent)

        yield make
    discord.http.Route.BASE = base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


async def test_each_replica_answers_the_events_of_its_own_shard_once(
    server: DiscordServer, replicas: MakeReplica
) -> None:
    first, second = await replicas(0), await replicas(1)
    await server.wait_ready(shards=SHARDS)
    for bot in (first, second):
        await asyncio.wait_for(bot.client.connected.wait(), 10)
    guild_shard = (GUILD_ID >> 22) % SHARDS
    assert [g.id for g in (first, second)[guild_shard].client.guilds] == [GUILD_ID]
    assert list((first, second)[1 - guild_shard].client.guilds) == []

    await server.post_message(CHANNEL_GENERAL, CODE, mention_bot=True)
    thread = await server.wait_for(lambda: next(iter(server.threads), None))
    assert isinstance(thread, int)
    answers = await (first, second)[guild_shard].answer_in(thread)
    assert [m.content.count("42 from shard") for m in answers] == [1]
    assert f"42 from shard {guild_shard}" in answers[0].content

    dm = await server.dm_channel(ALICE)
    await server.post_message(dm, CODE)
    answers = await first.answer_in(dm)
    assert [m.content.count("42 from shard") for m in answers] == [1]
    assert "42 from shard 0" in answers[0].content
    await asyncio.sleep(0.3)  # a second answer, were there one, would be on its way
    assert sum("42 from shard" in m.content for m in server.channel_messages(dm)) == 1

    synced = [path for method, path in server.requests if method == "PUT" and "commands" in path]
    assert len(synced) == 1  # shard 0's replica registers the commands for all


def test_the_shard_is_a_number_or_the_statefulsets_ordinal() -> None:
    sharded = DiscordSettings(shard_count=3)
    assert DiscordSettings().shard("cellmate-bot-2") is None  # not sharded
    assert sharded.shard("cellmate-bot-2") == 2
    assert dataclasses.replace(sharded, shard_id="1").shard("anything") == 1
    with pytest.raises(ValueError, match="ends in no ordinal"):
        sharded.shard("cellmate-bot")
    with pytest.raises(ValueError, match="must be below the count"):
        sharded.shard("cellmate-bot-3")
    with pytest.raises(ValueError, match="a shard number or auto"):
        DiscordSettings(shard_count=3, shard_id="first")
    with pytest.raises(ValueError, match="must not be negative"):
        DiscordSettings(shard_count=-1)


def test_each_shards_replica_labels_its_own_sandboxes() -> None:
    """A process removes or re-attaches the sandboxes of its label at start: replicas
    sharing one would take each other's."""
    replica = DiscordSettings(token=TOKEN, shard_count=2, shard_id="1")
    assert Settings(instance="team").sandbox_instance == "team"
    assert Settings(instance="team", discord=replica).sandbox_instance == "team-shard1"
    sibling = dataclasses.replace(replica, shard_id="0")
    assert Settings(instance="team", discord=sibling).sandbox_instance == "team-shard0"


def test_replicas_without_shards_label_their_sandboxes_by_ordinal() -> None:
    """Slack-only replicas share a database but no shard: the StatefulSet's ordinal tells
    them apart; a lone process (no shared database, or no ordinal) keeps the plain label."""
    url = "postgresql://cellmate@db.example/cellmate"
    for host, label in (("cellmate-0", "team-replica0"), ("cellmate-bot-12", "team-replica12")):
        with unittest.mock.patch("socket.gethostname", return_value=host):
            assert Settings(instance="team", database_url=url).sandbox_instance == label
            assert Settings(instance="team").sandbox_instance == "team"
    for host in ("cellmate-5d8f7c-xk2lp", "laptop"):
        with unittest.mock.patch("socket.gethostname", return_value=host):
            assert Settings(instance="team", database_url=url).sandbox_instance == "team"


async def test_doctor_names_the_replicas_shard_or_why_it_has_none(server: DiscordServer) -> None:
    sharded = DiscordSettings(token=TOKEN, api_url=server.api_url, shard_count=2, shard_id="1")
    found = await check_discord(Settings(instance="team", discord=sharded))
    assert [(f.name, f.ok) for f in found] == [("discord", True), ("shards", True)]
    assert found[1].detail == (
        "this replica is shard 1 of 2 (DMs are shard 0's); its sandboxes are labelled team-shard1"
    )
    unnamed = dataclasses.replace(sharded, shard_id="auto")
    with unittest.mock.patch("socket.gethostname", return_value="laptop"):
        found = await check_discord(Settings(discord=unnamed))
    assert not found[1].ok
    assert "ends in no ordinal" in found[1].detail
    assert "StatefulSet" in found[1].fix
