"""Events handled once across replicas that share a database: the record on both engines
(first replica wins, a failed handling forgotten, old keys pruned, a database that cannot
say lets the event through), and two Slack replicas in HTTP mode behind one stand-in Slack:
Slack's retry of an event that reached one replica, delivered to the other, and a signed
request sent again to the other replica, each run once."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.standins.ports import free_port
from bench.standins.slack_server import BOT_TOKEN, C_GENERAL, SIGNING_SECRET, SlackServer
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.registry import Turns
from bot.conversations.shared_events import KEEP_S, PRUNE_EVERY, SharedEvents
from bot.database import Databases
from bot.errors import Draining
from bot.ops.http import start_server
from bot.platforms.on_slack import EVENTS_PATH, add_http_route, build_slack
from bot.settings import SlackSettings
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun, stdout


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend({"print('ran once')": FakeRun(outputs=[stdout("ran once\n")])})


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_replica_to_record_an_event_handles_it(databases: Databases) -> None:
    clock = Clock()
    one, other = SharedEvents(databases, clock), SharedEvents(databases, clock)
    try:
        assert one.first_time("C1:1700.1")
        assert not other.first_time("C1:1700.1")
        assert not one.first_time("C1:1700.1")
        assert other.first_time("message:42")
        one.forget("message:42")  # its handling failed: the platform's retry is taken
        assert one.first_time("message:42")

        clock.now += KEEP_S + 1
        for n in range(PRUNE_EVERY):
            one.first_time(f"later:{n}")
        assert other.first_time("C1:1700.1")  # pruned a day on: a new event by then
        assert not other.first_time("later:0")
    finally:
        one.close()
        other.close()


def test_a_database_that_cannot_say_lets_the_event_through(databases: Databases) -> None:
    events = SharedEvents(databases)
    events.close()
    databases.close()
    assert events.first_time("C1:1700.2")  # answered, maybe twice, rather than never


@dataclasses.dataclass
class Replica:
    slack: Any
    url: str


MakeReplica = Callable[[], Awaitable[Replica]]


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    made = SlackServer(mode="http")
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def replicas(
    server: SlackServer,
    shared_database: Databases,
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
) -> AsyncIterator[MakeReplica]:
    where = shared_database
    async with contextlib.AsyncExitStack() as stack:
        numbers = itertools.count()

        async def make() -> Replica:
            folder = tmp_path / f"replica-{next(numbers)}"
            conversations = Conversations(make_agent(fake_executor, None, folder))
            events = SharedEvents(where)
            stack.callback(events.close)
            conversations.shared_events = events
            settings = SlackSettings(
                bot_token=BOT_TOKEN,
                signing_secret=SIGNING_SECRET,
                api_url=server.api_url,
                cooldown_s=0,
            )
            slack = build_slack(conversations, settings)
            await slack.connect()
            app = web.Application()
            add_http_route(slack, app)
            port = free_port()
            runner = await start_server(app, "127.0.0.1", port)
            stack.push_async_callback(runner.cleanup)
            return Replica(slack, f"http://127.0.0.1:{port}{EVENTS_PATH}")

        yield make


async def _quiet(server: SlackServer, *replicas: Replica) -> None:
    """Wait until no replica has a turn running."""
    await server.wait_for(lambda: not any(r.slack.conversations.turns for r in replicas))


async def test_slacks_retry_delivered_to_another_replica_runs_once(
    server: SlackServer, replicas: MakeReplica
) -> None:
    a, b = await replicas(), await replicas()
    server.bot_url = a.url
    _, deliveries = await server.post(C_GENERAL, "```\nprint('ran once')\n```", mention_bot=True)
    server.bot_url = b.url  # Slack thought the first delivery lost, and tries again
    for delivery in deliveries:
        retried = await server.redeliver(delivery, attempt=1, reason="http_timeout")
        assert retried.status == 200
    await server.wait_for(
        lambda: any("ran once" in m.text for m in server.channel_messages(C_GENERAL, by_bot=True))
    )
    await _quiet(server, a, b)
    await asyncio.sleep(0.5)  # a second run, were there one, would have started by now
    await _quiet(server, a, b)
    shown = [m for m in server.channel_messages(C_GENERAL, by_bot=True) if "ran once" in m.text]
    assert len(shown) == 1


async def test_a_signed_request_sent_again_to_another_replica_runs_once(
    server: SlackServer, replicas: MakeReplica
) -> None:
    a, b = await replicas(), await replicas()
    body = server.slash_body("/run", "print('ran once')", server.response_url())
    headers = server.signed_headers(body, "application/x-www-form-urlencoded", int(time.time()))
    server.bot_url = a.url
    assert (await server.send_raw(body, headers)).status == 200
    await server.wait_for(
        lambda: any("ran once" in m.text for m in server.channel_messages(C_GENERAL, by_bot=True))
    )
    await _quiet(server, a, b)
    server.bot_url = b.url
    again = await server.send_raw(body, headers)
    assert again.status == 200  # acknowledged, and dropped
    await asyncio.sleep(0.5)
    await _quiet(server, a, b)
    shown = [m for m in server.channel_messages(C_GENERAL, by_bot=True) if "ran once" in m.text]
    assert len(shown) == 1


async def test_an_event_reaching_a_replica_that_is_shutting_down_is_answered_by_another(
    server: SlackServer, replicas: MakeReplica
) -> None:
    """A replica that is draining refuses Events API deliveries with 503, so Slack sends the
    event again (behind a Service, to another replica) instead of it being acknowledged and
    lost when the process exits."""
    a, b = await replicas(), await replicas()
    a.slack.conversations.turns.accepting = False  # as a SIGTERM's drain sets it
    server.bot_url = a.url
    _, deliveries = await server.post(C_GENERAL, "```\nprint('ran once')\n```", mention_bot=True)
    assert [d.status for d in deliveries] == [503, 503]
    server.bot_url = b.url  # Slack's retry
    for delivery in deliveries:
        retried = await server.redeliver(delivery, attempt=1, reason="http_error")
        assert retried.status == 200
    await server.wait_for(
        lambda: any("ran once" in m.text for m in server.channel_messages(C_GENERAL, by_bot=True))
    )
    await _quiet(server, a, b)
    await asyncio.sleep(0.5)
    await _quiet(server, a, b)
    shown = [m for m in server.channel_messages(C_GENERAL, by_bot=True) if "ran once" in m.text]
    assert len(shown) == 1
    assert not a.slack.conversations.turns


async def test_a_message_received_before_a_drain_is_answered_before_the_process_exits() -> None:
    """Acknowledged but not yet a turn (its person looked up, its checks running) when the
    drain begins: the drain waits for it, and it runs (its platform was told it was
    received); a message that arrives once the drain began is refused."""
    turns = Turns()
    arrived = asyncio.Event()
    ran: list[str] = []

    async def message() -> None:
        with turns.arriving():
            await arrived.wait()
            with turns.running("c", "alice"):
                ran.append("turn")

    handling = asyncio.create_task(message())
    await asyncio.sleep(0)
    draining = asyncio.create_task(turns.drain(grace_s=5))
    await asyncio.sleep(0.05)
    assert not draining.done()
    arrived.set()
    assert await draining == 0
    await handling
    assert ran == ["turn"]
    with pytest.raises(Draining), turns.arriving(), turns.running("d", "bob"):
        ran.append("late")
    assert ran == ["turn"]
