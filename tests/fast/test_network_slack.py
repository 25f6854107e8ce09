"""The network on Slack, as people see it: /network for anyone to list and for admins to
allow and deny, and the card posted in the thread when code hits a closed door, with Allow
once, Allow in this channel and Deny; the real slack_bolt app against the Slack stand-in
(Socket Mode and HTTP mode) and the scripted model, on the fake sandbox, with the egress
proxy's stand-in (tests/support/egress.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.standins.openai_server import ScriptedModel, runs, says
from bench.standins.ports import free_port
from bench.standins.slack_server import (
    ADMIN,
    ALICE,
    APP_TOKEN,
    BOT_TOKEN,
    C_GENERAL,
    SIGNING_SECRET,
    Message,
    SlackServer,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.doors import NETWORK_FOR_APPROVERS, NETWORK_OFF, DoorChoice
from bot.conversations.network import NetworkGrants, NetworkSettings
from bot.database import Databases
from bot.ops.http import start_server
from bot.platforms.on_slack import EVENTS_PATH, add_http_route, build_slack
from bot.platforms.on_slack.doors import ACTIONS
from bot.platforms.on_slack.render import plain
from bot.settings import SlackSettings
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.egress import Proxy, fetch
from tests.support.on_slack import Bot, button

HOST = "data.example.com"
FETCH = fetch(HOST)
OPENED = f"fetched {HOST}:443"
CARD = f"tried to reach {HOST}:443, which is not open to this channel"
ONCE, CHANNEL, DENY = (ACTIONS[choice][0] for choice in DoorChoice)


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def proxy() -> Proxy:
    return Proxy()


@pytest.fixture
def fake_backend(proxy: Proxy) -> FakeBackend:
    return FakeBackend(proxy.script())


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def start_bot(
    mode: str,
    model: ScriptedModel,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
    proxy: Proxy,
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def start(network_mode: str = "allowlist") -> Bot:
        from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

        server = SlackServer(mode=mode)  # type: ignore[arg-type]
        await server.start()
        cleanups.append(server.close)
        agent = make_agent(fake_executor, model, tmp_path, timeout=5)
        settings = NetworkSettings(mode=network_mode)  # type: ignore[arg-type]
        network = NetworkGrants(Databases.sqlite(tmp_path), settings)

        async def close() -> None:
            network.close()

        cleanups.append(close)
        conversations = Conversations(agent, admins=frozenset({ADMIN}), network=network)
        proxy.conversations = conversations
        chosen = SlackSettings(
            bot_token=BOT_TOKEN,
            app_token=APP_TOKEN if mode == "socket" else "",
            signing_secret=SIGNING_SECRET if mode == "http" else "",
            api_url=server.api_url,
            cooldown_s=0,
        )
        slack = build_slack(conversations, chosen)
        await slack.connect()
        if mode == "socket":
            handler = AsyncSocketModeHandler(slack.app, APP_TOKEN)
            await handler.connect_async()  # type: ignore[no-untyped-call]
            cleanups.insert(0, handler.close_async)
            await server.wait_connected()
        else:
            app = web.Application()
            add_http_route(slack, app)
            port = free_port()
            runner = await start_server(app, "127.0.0.1", port)
            cleanups.insert(0, runner.cleanup)
            server.bot_url = f"http://127.0.0.1:{port}{EVENTS_PATH}"
        return Bot(server, slack)

    yield start
    for cleanup in cleanups:
        with contextlib.suppress(Exception):
            await cleanup()


async def _network(bot: Bot, text: str, user: str = ADMIN) -> str:
    before = len(bot.server.responses)
    await bot.server.slash("/network", text, user=user)
    await bot.server.wait_for(lambda: len(bot.server.responses) > before)
    return str(bot.server.responses[before]["text"])


def _cards(bot: Bot, root: str) -> list[Message]:
    return [m for m in bot.thread(C_GENERAL, root) if m.text.startswith(":door:")]


async def _card(bot: Bot, root: str, count: int = 1) -> Message:
    def found() -> Message | None:
        cards = _cards(bot, root)
        return cards[count - 1] if len(cards) >= count and button(cards[count - 1], DENY) else None

    card = await bot.server.wait_for(found)
    assert isinstance(card, Message)
    return card


async def _decided(bot: Bot, root: str, outcome: str) -> Message:
    found = await bot.server.wait_for(
        lambda: next((m for m in _cards(bot, root) if outcome in m.text), None)
    )
    assert isinstance(found, Message)
    assert not any(button(found, action) for action in (ONCE, CHANNEL, DENY))
    return found


async def _shown(bot: Bot, root: str, text: str) -> None:
    await bot.server.wait_for(
        lambda: any(text in m.text for m in bot.thread(C_GENERAL, root)) or None
    )


async def test_allow_once_reruns_the_cell_and_a_non_approver_cannot_grant(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    model.script(runs(FETCH), says("The host is closed."))
    message, _ = await bot.server.post(C_GENERAL, "fetch the data", mention_bot=True)
    root = message.ts
    card = await _card(bot, root)
    assert CARD in card.text
    await bot.answered(C_GENERAL, root)
    await bot.server.click(card, ONCE, user=ALICE)
    await bot.server.wait_for(
        lambda: NETWORK_FOR_APPROVERS in [str(r.get("text")) for r in bot.server.responses] or None
    )
    assert len(fake_backend.runs) == 1
    await bot.server.click(card, ONCE, user=ADMIN)
    await _decided(bot, root, f"allowed for the next run by <@{ADMIN}>; the code runs again")
    await _shown(bot, root, OPENED)
    assert [code.strip() for code in fake_backend.runs] == [FETCH, FETCH]
    assert f"{HOST}" not in await _network(bot, "list", user=ALICE)  # used up by that run


async def test_allow_in_channel_then_deny_on_the_next_door(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot()
    model.script(runs(FETCH), says("Closed."), runs(fetch("other.example.com")), says("Also."))
    message, _ = await bot.server.post(C_GENERAL, "fetch the data", mention_bot=True)
    root = message.ts
    card = await _card(bot, root)
    await bot.answered(C_GENERAL, root)
    await bot.server.click(card, CHANNEL, user=ADMIN)
    await _decided(bot, root, f"allowed in this channel by <@{ADMIN}>")
    await _shown(bot, root, OPENED)
    assert f"{HOST} (port 443): this channel" in await _network(bot, "", user=ALICE)

    await bot.server.post(C_GENERAL, "and the other one", thread_ts=root)
    second = await _card(bot, root, count=2)
    assert "other.example.com:443" in second.text
    await bot.server.click(second, DENY, user=ADMIN)
    await _decided(bot, root, f"stays closed (denied by <@{ADMIN}>)")
    assert "other.example.com" not in await _network(bot, "list")
    assert len(fake_backend.runs) == 3


async def test_network_command_is_for_admins_and_refuses_bad_patterns(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot()
    assert await _network(bot, f"allow {HOST}", user=ALICE) == NETWORK_FOR_APPROVERS
    for bad, why in [
        ("[::1]:8080", "is a private address"),
        ("192.168.1.10", "is a private address"),
        ("2130706433", "short, integer, octal or hex form"),
        ("*.*.example.com", "the only wildcard allowed is a leading"),
        ("*.org", "would open a whole top-level domain"),
    ]:
        assert why in await _network(bot, f"allow {bad}")
    assert "Use `/network`" in await _network(bot, "allow")
    assert "is now open for the next run here only" in await _network(bot, f"allow {HOST} once")
    assert f"{HOST} is now closed here." in await _network(bot, f"deny {HOST}")


async def test_off_mode_grants_nothing_and_shows_no_card(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await start_bot(network_mode="off")
    assert await _network(bot, f"allow {HOST}") == plain(NETWORK_OFF)
    model.script(runs(FETCH), says("No network here."))
    message, _ = await bot.server.post(C_GENERAL, "fetch the data", mention_bot=True)
    await bot.answered(C_GENERAL, message.ts)
    assert _cards(bot, message.ts) == []
