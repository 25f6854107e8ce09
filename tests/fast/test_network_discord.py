"""The network on Discord, as people see it: /network for anyone to list and for moderators
to allow and deny, and the card posted in the thread when code hits a closed door, with
Allow once, Allow in this channel and Deny; the real discord.py client against the Discord
stand-in and the scripted model, on the fake sandbox, with the egress proxy's stand-in
(tests/support/egress.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl

from bench.standins.discord_server import (
    ALICE,
    BOB,
    CHANNEL_GENERAL,
    OWNER,
    TOKEN,
    DiscordServer,
    Message,
)
from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.doors import NETWORK_FOR_APPROVERS, NETWORK_OFF
from bot.conversations.network import NetworkGrants, NetworkSettings
from bot.database import Databases
from bot.platforms.on_discord import build_client, run_discord
from bot.platforms.on_discord.render import plain
from bot.settings import DiscordSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.egress import Proxy, fetch
from tests.support.on_discord import Bot, button_id, has_button, interaction_reply

HOST = "data.example.com"
FETCH = fetch(HOST)
OPENED = f"fetched {HOST}:443"
CARD = f"tried to reach {HOST}:443, which is not open to this channel"


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def proxy() -> Proxy:
    return Proxy()


@pytest.fixture
def fake_backend(proxy: Proxy) -> FakeBackend:
    return FakeBackend(proxy.script())


@pytest.fixture
async def start_bot(
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
    proxy: Proxy,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    started: list[tuple[DiscordServer, Any, asyncio.Task[None], NetworkGrants]] = []
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

    async def start(mode: str = "allowlist") -> Bot:
        server = DiscordServer()
        await server.start()
        agent = make_agent(fake_executor, model, tmp_path, timeout=5)
        settings = NetworkSettings(mode=mode)  # type: ignore[arg-type]
        network = NetworkGrants(Databases.sqlite(tmp_path), settings)
        conversations = Conversations(agent, network=network)
        proxy.conversations = conversations
        chosen = DiscordSettings(token=TOKEN, api_url=server.api_url, cooldown_s=0)
        client = build_client(conversations, chosen)
        client._connection.guild_ready_timeout = 0.05
        task = asyncio.create_task(run_discord(client))
        started.append((server, client, task, network))
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 10)
        return Bot(server, client, agent)

    yield start
    for server, client, task, network in started:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        network.close()
        await server.close()
    discord.http.Route.BASE = base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


async def _network(bot: Bot, user: int = OWNER, **options: object) -> str:
    done = await bot.server.slash("network", options, user=user)
    return await interaction_reply(bot, done)


async def _ask(bot: Bot) -> int:
    await bot.server.post_message(CHANNEL_GENERAL, "fetch the data", mention_bot=True)
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    return thread_id


def _cards(bot: Bot, channel: int) -> list[Message]:
    return [m for m in bot.server.channel_messages(channel, by_bot=True) if "🚪" in m.content]


async def _card(bot: Bot, channel: int, count: int = 1) -> Message:
    """The `count`th card in `channel`, once it shows its three buttons."""

    def found() -> Message | None:
        cards = _cards(bot, channel)
        if len(cards) < count or not has_button(cards[count - 1], "Deny"):
            return None
        return cards[count - 1]

    card = await bot.server.wait_for(found)
    assert isinstance(card, Message)
    return card


async def _decided(bot: Bot, card: Message, outcome: str) -> Message:
    found = await bot.server.wait_for(
        lambda: (
            bot.server.messages[card.id]
            if outcome in bot.server.messages[card.id].content
            else None
        )
    )
    assert isinstance(found, Message)
    assert found.components == []
    return found


async def _shown(bot: Bot, channel: int, text: str, count: int = 1) -> None:
    await bot.server.wait_for(
        lambda: (
            sum(text in m.content for m in bot.server.channel_messages(channel, by_bot=True))
            >= count
            or None
        )
    )


async def test_allow_once_reruns_the_cell_and_the_next_run_meets_the_door_again(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    model.script(runs(FETCH), says("The host is closed."))
    thread_id = await _ask(bot)
    card = await _card(bot, thread_id)
    assert CARD in card.content
    assert [has_button(card, label) for label in ("Allow once", "Allow in this channel")] == [
        True,
        True,
    ]
    await bot.answer_in(thread_id)
    refused = await bot.server.click(card, button_id(card, "Allow once"), user=ALICE)
    assert await interaction_reply(bot, refused) == NETWORK_FOR_APPROVERS
    assert len(fake_backend.runs) == 1

    await bot.server.click(card, button_id(card, "Allow once"), user=OWNER)
    await _decided(bot, card, f"allowed for the next run by <@{OWNER}>; the code runs again")
    await _shown(bot, thread_id, OPENED)
    assert [code.strip() for code in fake_backend.runs] == [FETCH, FETCH]

    # The grant was for one run: the next one is refused again, with a new card.
    again = await bot.server.slash("run", {"code": FETCH}, channel_id=thread_id, user=ALICE)
    assert again is not None
    second = await _card(bot, thread_id, count=2)
    await bot.server.click(second, button_id(second, "Deny"), user=OWNER)
    await _decided(bot, second, f"stays closed (denied by <@{OWNER}>)")
    assert len(fake_backend.runs) == 3  # Deny runs nothing again
    assert sum(OPENED in m.content for m in bot.server.channel_messages(thread_id)) == 1


async def test_allow_in_the_channel_outlives_a_restart(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    first = await start_bot()
    model.script(runs(FETCH), says("Closed for now."))
    thread_id = await _ask(first)
    card = await _card(first, thread_id)
    await first.answer_in(thread_id)
    await first.server.click(card, button_id(card, "Allow in this channel"), user=OWNER)
    await _decided(first, card, f"allowed in this channel by <@{OWNER}>")
    await _shown(first, thread_id, OPENED)
    await first.client.close()

    second = await start_bot()  # a new process over the same data directory
    listed = await _network(second, user=BOB)
    assert f"{HOST} (port 443): this channel, by {OWNER}" in listed
    model.script(runs(FETCH), says("Fetched it."))
    thread_id = await _ask(second)
    await _shown(second, thread_id, OPENED)
    await second.answer_in(thread_id)
    assert _cards(second, thread_id) == []


async def test_network_command_is_for_moderators_and_refuses_bad_patterns(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot()
    assert await _network(bot, user=ALICE, action="allow", host=HOST) == NETWORK_FOR_APPROVERS
    assert "Nothing is open" in await _network(bot, user=ALICE)
    for bad, why in [
        ("10.1.2.3:5432", "is a private address"),
        ("169.254.169.254", "is a private address"),
        ("0x7f000001", "short, integer, octal or hex form"),
        ("exa*mple.com", "the only wildcard allowed is a leading"),
        ("https://example.com/x", "is not a host"),
        ("example.com:70000", "the port must be a number"),
    ]:
        assert why in await _network(bot, action="allow", host=bad)
    answer = await _network(bot, action="allow", host=f"{HOST}:8443")
    assert f"{HOST} (port 8443) is now open in this channel." in answer
    assert f"{HOST} (port 8443): this channel" in await _network(bot, user=ALICE)
    assert await _network(bot, user=ALICE, action="deny", host=HOST) == NETWORK_FOR_APPROVERS
    assert f"{HOST} is now closed here." in await _network(bot, action="deny", host=HOST)
    assert "Nothing is open" in await _network(bot)


async def test_off_mode_grants_nothing_and_shows_no_card(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(mode="off")
    assert await _network(bot, action="allow", host=HOST) == plain(NETWORK_OFF)
    assert await _network(bot) == plain(NETWORK_OFF)
    model.script(runs(FETCH), says("No network here."))
    thread_id = await _ask(bot)
    await bot.answer_in(thread_id)
    assert _cards(bot, thread_id) == []
    assert not any(OPENED in m.content for m in bot.server.channel_messages(thread_id))
