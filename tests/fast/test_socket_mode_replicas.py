"""Slack's Socket Mode with several replicas: each opens its own connection and Slack
spreads the app's events across them. Two replicas (each its own Conversations, agent and
executor) on one stand-in Slack that deals envelopes to the connections in turn, sharing a
database (turn leases, events handled once) and a fake cluster with a session ledger: a
mention is answered once, and a reply in its thread, which Slack hands to the other
replica, runs in the same session (the variable set by the first is there)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

from bench.standins.slack_server import APP_TOKEN, BOT_TOKEN, C_GENERAL, SlackServer
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.shared_events import SharedEvents
from bot.conversations.turn_leases import TurnLeases
from bot.database import Databases
from bot.platforms.on_slack import build_slack
from bot.settings import SlackSettings
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun
from executor.ownership import MemoryOwners

SCRIPT = {
    "x = 41": FakeRun(assigns={"x": "41"}),
    "print(x)": FakeRun(shows="x"),
}
LIMITS = SandboxLimits(timeout_s=5, interrupt_grace_s=0.2)


async def test_socket_mode_spreads_a_thread_across_replicas_and_its_session_follows(
    shared_database: Databases, make_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    server = SlackServer(mode="socket")
    server.spread_sockets = True
    await server.start()
    cluster = FakeBackend(SCRIPT, keeps_sessions=True, instance="replica-0")
    ledger = MemoryOwners("replica-0")
    numbers = itertools.count()
    replicas: list[Conversations] = []
    leases: list[TurnLeases] = []
    turns: dict[str, int] = {}

    def busy() -> bool:
        return any(r.turns for r in replicas) or any(lease.live() for lease in leases[:1])

    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(server.close)

        async def replica() -> None:
            number = next(numbers)
            name = f"replica-{number}"
            backend = cluster if number == 0 else cluster.replica(name)
            owners = ledger if number == 0 else ledger.sharing(name)
            executor = await stack.enter_async_context(
                Executor(
                    "fake", limits=LIMITS, backend=backend, pool=PoolSettings(size=0), owners=owners
                )
            )
            conversations = Conversations(make_agent(executor, None, tmp_path / name))
            lease = TurnLeases(shared_database, replica=name)
            events = SharedEvents(shared_database)
            stack.callback(lease.close)
            stack.callback(events.close)
            conversations.leases = lease
            leases.append(lease)
            turns[name] = 0
            ran = executor.sessions.run

            async def counted(*args: Any, **kwargs: Any) -> Any:
                turns[name] += 1
                return await ran(*args, **kwargs)

            executor.sessions.run = counted  # type: ignore[method-assign]
            conversations.shared_events = events
            settings = SlackSettings(
                bot_token=BOT_TOKEN, app_token=APP_TOKEN, api_url=server.api_url, cooldown_s=0
            )
            slack = build_slack(conversations, settings)
            await slack.connect()
            handler = AsyncSocketModeHandler(slack.app, APP_TOKEN)
            await handler.connect_async()  # type: ignore[no-untyped-call]
            stack.push_async_callback(handler.close_async)
            replicas.append(conversations)

        await replica()
        await server.wait_connected()
        await replica()
        await server.wait_for(lambda: len(server._live_sockets()) == 2)

        def shown(text: str) -> list[str]:
            return [
                m.text
                for m in server.channel_messages(C_GENERAL, thread_ts=root, by_bot=True)
                if text in m.text
            ]

        asked, deliveries = await server.post(C_GENERAL, "```\nx = 41\n```", mention_bot=True)
        root = asked.ts
        assert [d.status for d in deliveries] == [200, 200]  # one envelope to each replica
        await server.wait_for(lambda: shown("x = 41") and not busy())
        # Replies in the thread, no mention: one `message` envelope each, dealt in turn.
        for _ in range(3):
            await server.post(C_GENERAL, "```\nprint(x)\n```", thread_ts=root)
        await server.wait_for(lambda: len(shown("41\n")) >= 3 and not busy())
        served = [name for name, count in turns.items() if count]
        assert sorted(served) == ["replica-0", "replica-1"], turns
        assert len(cluster.every) == 1, "a replica started a session of its own"
        texts = [m.text for m in server.channel_messages(C_GENERAL, thread_ts=root, by_bot=True)]
        assert sum("print(x)" in text for text in texts) == 3, texts
        assert not any("NameError" in text for text in texts), texts
