"""The network in the console (`cellmate chat` fed by a pipe): /network list, allow and deny,
and the closed door asked about when the turn ends: o (once), c (the console's channel) or n;
an allow runs the code again. The proxy is the fake's stand-in (tests/support/egress.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.doors import NETWORK_OFF
from bot.conversations.network import NetworkGrants, NetworkSettings
from bot.database import Databases
from bot.platforms.console import CONVERSATION, DOOR_PROMPT, Console
from executor import Executor
from executor.fake_backend import FakeBackend
from tests.fast.test_console_turns import Chat
from tests.support.egress import Proxy, fetch

CELL = f"```python\n{fetch('data.example.com')}\n```"
OPENED = "fetched data.example.com:443"
CLOSED = "data.example.com is not open to this channel"


@pytest.fixture
def proxy() -> Proxy:
    return Proxy()


@pytest.fixture
def fake_backend(proxy: Proxy) -> FakeBackend:
    return FakeBackend(proxy.script())


@pytest.fixture
def chat(
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    model: ScriptedModel,
    tmp_path: Path,
    proxy: Proxy,
) -> Iterator[Callable[..., Chat]]:
    opened: list[NetworkGrants] = []

    def make(mode: str = "allowlist", allowed: tuple[str, ...] = ()) -> Chat:
        agent = make_agent(fake_executor, model, tmp_path, timeout=5)
        settings = NetworkSettings(mode=mode, allowed=allowed)  # type: ignore[arg-type]
        network = NetworkGrants(Databases.sqlite(tmp_path), settings)
        opened.append(network)
        made = Chat(agent, tmp_path)
        conversations = Conversations(agent, network=network)
        proxy.conversations = conversations
        made.console = Console(conversations, made.out, tmp_path / "exports")
        return made

    yield make
    for network in opened:
        with contextlib.suppress(Exception):
            network.close()


async def test_allow_once_runs_the_cell_again_and_the_next_run_is_closed_again(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    console = chat()
    out = await console.pipe(CELL, "o")
    asked = out.index(DOOR_PROMPT)
    assert CLOSED in out[:asked]
    assert "🚪 The code here tried to reach data.example.com:443" in out[:asked]
    assert "✅ data.example.com:443 allowed for the next run by you; the code runs again." in out
    assert OPENED in out[asked:]
    assert len(fake_backend.runs) == 2

    out = await console.pipe(CELL, "n")
    assert CLOSED in out
    assert "🚫 data.example.com:443 stays closed (denied by you)." in out
    assert OPENED not in out
    assert len(fake_backend.runs) == 3  # Deny runs nothing again
    out = await console.pipe("/network")
    assert "Nothing is open to the network here" in out


async def test_allow_once_runs_code_again_in_its_language(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    console = chat()
    out = await console.pipe(CELL.replace("```python", "```r"), "o")
    assert DOOR_PROMPT in out, out
    assert OPENED in out[out.index(DOOR_PROMPT) :]
    assert [run.language for run in fake_backend.asked] == ["r", "r"]


async def test_allow_in_the_channel_persists_across_a_restart_until_denied(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    out = await chat().pipe(CELL, "c")
    assert "✅ data.example.com:443 allowed in this channel by you" in out
    again = chat()  # a new process over the same data directory
    out = await again.pipe("/network", CELL, CELL)
    assert "data.example.com (port 443): this channel, by console" in out
    assert out.count(OPENED) == 2
    assert DOOR_PROMPT not in out
    out = await again.pipe("/network deny data.example.com", CELL, "n")
    assert "data.example.com is now closed here." in out
    assert CLOSED in out


async def test_network_command_lists_allows_and_refuses_bad_patterns(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    console = chat(allowed=("pypi.org", "*.pythonhosted.org"))
    out = await console.pipe(
        "/network list",
        "/network allow data.example.com once",
        "/network allow 127.0.0.1",
        "/network allow *.com",
        "/network allow api.example.com:8443 sometimes",
        "/network",
    )
    assert "pypi.org (port 443 and 80): the operator (CELLMATE_NETWORK_ALLOWED)" in out
    assert "*.pythonhosted.org (port 443 and 80): the operator" in out
    assert "data.example.com (port 443 and 80) is now open for the next run here only." in out
    assert "'127.0.0.1' is a private address" in out
    assert "'*.com' would open a whole top-level domain" in out
    assert "Use /network, /network allow HOST[:PORT] [once|channel]" in out
    assert "data.example.com (port 443 and 80): the next run here only, by console" in out
    out = await console.pipe(CELL, "/network", "/network deny pypi.org")
    assert OPENED in out  # the one-run grant opened that run ...
    assert "data.example.com" not in out.split(OPENED)[1]  # ... and was used up by it
    assert "pypi.org is opened by the operator (CELLMATE_NETWORK_ALLOWED)" in out


async def test_off_mode_opens_nothing_and_shows_no_card(
    chat: Callable[..., Chat], fake_backend: FakeBackend, proxy: Proxy
) -> None:
    console = chat(mode="off", allowed=("data.example.com",))
    out = await console.pipe("/network", "/network allow data.example.com", CELL)
    assert out.count(NETWORK_OFF) == 2
    assert OPENED not in out
    assert DOOR_PROMPT not in out
    assert proxy.conversations is not None
    assert not proxy.conversations.network_grants(CONVERSATION).grants
    assert await proxy.conversations.door_closed(CONVERSATION, "data.example.com", 443) is None
