"""Load and faults through the Slack front end in HTTP mode, with the real sandbox and a
model that answers every conversation by its content: 100 mentions at once, the Docker
engine restarted mid-way, and storage down."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from bench.standins import slack_server as sl
from bench.standins.openai_server import Reply, ScriptedModel, runs, says
from bench.standins.ports import free_port
from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations
from bot.database import Databases
from bot.metrics import Metrics
from bot.ops.http import start_server
from bot.platforms.on_slack import EVENTS_PATH, CellmateSlack, add_http_route, build_slack
from bot.settings import SlackSettings
from executor import Executor, PoolSettings, SandboxLimits, default_tag
from storage.azure_blob import AzureBlobStorage
from storage.base import Storage
from storage.local import LocalStorage
from tests.integration.conftest import TEST_INSTANCE
from tests.support.azurite import ACCOUNT, KEY
from tests.support.links import SECRET
from tests.support.sandboxes import assert_no_sandbox_left

pytestmark = pytest.mark.docker

INSTANCE = f"{TEST_INSTANCE}-load"
ROOT = Path(__file__).resolve().parents[2]
TASK = re.compile(r"task (\d+)")
RESULT = re.compile(r"finished: result \d+")


def by_task(chart: bool = False) -> Callable[[dict[str, Any]], Reply]:
    """A model that computes `task N` as N * 2 (with a chart, if asked), then reports it."""

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            found = re.search(r"result \d+", str(last["content"]))
            return says(f"finished: {found.group() if found else last['content'][:80]}")
        task = int(TASK.findall(str(last["content"]))[-1])
        code = f"print('result', {task} * 2)"
        if chart:
            code = f"import matplotlib.pyplot as plt\nplt.plot([0, {task}])\nplt.show()\n{code}"
        return runs(code)

    return respond


@dataclass
class Deployment:
    server: sl.SlackServer
    slack: CellmateSlack
    executor: Executor
    metrics: Metrics
    peak_live: int = 0

    async def mention(self, root: sl.Message, task: int) -> None:
        await self.server.post(
            sl.C_GENERAL,
            f"please do task {task}",
            user=f"U0LOAD{task:03d}",
            thread_ts=root.ts,
            mention_bot=True,
        )

    def answers(self, root: sl.Message) -> list[sl.Message]:
        """The bot's final messages in a thread (progress messages left out)."""
        return [
            m
            for m in self.server.channel_messages(sl.C_GENERAL, thread_ts=root.ts, by_bot=True)
            if not m.text.startswith((":hourglass", "*Code*")) and not m.files
        ]


@pytest.fixture
async def deploy(
    model: ScriptedModel, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Deployment]]]:
    cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def start(storage: Storage | None = None, max_live: int = 10) -> Deployment:
        server = sl.SlackServer(mode="http")
        await server.start()
        cleanups.append(server.close)
        executor = Executor(
            default_tag(),
            limits=SandboxLimits(timeout_s=60),
            instance=INSTANCE,
            pool=PoolSettings(size=4, max_live=max_live, queue_limit=200),
        )
        await executor.__aenter__()
        cleanups.insert(0, lambda: executor.__aexit__(None, None, None))
        metrics = Metrics()
        client = openai.AsyncOpenAI(api_key="k", base_url=model.base_url, max_retries=2)
        cleanups.append(client.close)
        agent = Agent(
            executor,
            storage or LocalStorage(tmp_path / "files", SECRET),
            History(Databases.sqlite(tmp_path)),
            client=client,
            model="scripted-model",
            limits=AgentLimits(max_steps=4),
            metrics=metrics,
        )
        settings = SlackSettings(
            bot_token=sl.BOT_TOKEN,
            signing_secret=sl.SIGNING_SECRET,
            api_url=server.api_url,
            cooldown_s=0,
        )
        slack = build_slack(Conversations(agent), settings)
        await slack.connect()
        app = web.Application()
        add_http_route(slack, app)
        port = free_port()
        runner = await start_server(app, "127.0.0.1", port)
        cleanups.insert(0, runner.cleanup)
        server.bot_url = f"http://127.0.0.1:{port}{EVENTS_PATH}"
        deployment = Deployment(server, slack, executor, metrics)

        async def watch() -> None:
            while True:
                deployment.peak_live = max(deployment.peak_live, executor.pool.live)
                await asyncio.sleep(0.1)

        watcher = asyncio.create_task(watch())
        cleanups.insert(0, lambda: _cancel(watcher))
        return deployment

    yield start
    for cleanup in cleanups:
        with contextlib.suppress(Exception):
            await cleanup()
    assert_no_sandbox_left(INSTANCE)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def roots(server: sl.SlackServer, count: int) -> list[sl.Message]:
    made = []
    for number in range(count):
        message, _ = await server.post(sl.C_GENERAL, f"thread {number}")
        made.append(message)
    return made


async def test_a_hundred_mentions_at_once_are_each_answered_once(
    deploy: Callable[..., Awaitable[Deployment]], model: ScriptedModel
) -> None:
    model.responder = by_task()
    bot = await deploy(max_live=10)
    threads = await roots(bot.server, 25)
    before = rss_mib()
    await asyncio.gather(*(bot.mention(threads[task % 25], task) for task in range(100)))

    def all_answered() -> bool:
        return sum(len(bot.answers(root)) for root in threads) >= 100

    await bot.server.wait_for(all_answered, 600)
    await asyncio.sleep(1)
    for number, root in enumerate(threads):
        # An answer may start with a note that the session was restarted to make room.
        texts = sorted(RESULT.search(m.text).group() for m in bot.answers(root))  # type: ignore[union-attr]
        expected = sorted(f"finished: result {task * 2}" for task in range(number, 100, 25))
        assert texts == expected, (number, texts)
    assert bot.peak_live <= 10
    assert rss_mib() - before < 400, "the bot's memory grew by more than 400 MiB"
    assert 'cellmate_turns_total{outcome="answer",platform="slack"} 100.0' in (
        bot.metrics.exposition().decode()
    )


def restart_engine() -> None:
    if subprocess.run(["systemctl", "is-active", "--quiet", "docker"], check=False).returncode == 0:
        subprocess.run(["systemctl", "restart", "docker"], check=True)
        return
    subprocess.run(["pkill", "-x", "dockerd"], check=True)
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure-docker.sh")], check=True)


async def test_an_engine_restart_fails_turns_in_flight_clearly_and_later_ones_succeed(
    deploy: Callable[..., Awaitable[Deployment]], model: ScriptedModel
) -> None:
    model.responder = by_task()
    bot = await deploy(max_live=6)
    threads = await roots(bot.server, 6)
    # Slow runs, so that the restart finds them in flight.
    original = model.responder
    model.responder = lambda body: (
        runs("import time\nprint('sleep' + 'ing', flush=True)\ntime.sleep(30)")
        if body["messages"][-1]["role"] == "user"
        else says("finished: slept")
    )
    await asyncio.gather(*(bot.mention(threads[task], task) for task in range(6)))
    await bot.server.wait_for(
        lambda: sum("sleeping" in m.text for m in bot.server.channel_messages(sl.C_GENERAL)) >= 6,
        120,
    )
    await asyncio.sleep(1)
    await asyncio.to_thread(restart_engine)
    await bot.server.wait_for(lambda: all(bot.answers(root) for root in threads), 180)
    for root in threads:
        (answer,) = bot.answers(root)  # one answer each, from the model or the bot itself
        progress = [
            m.text
            for m in bot.server.channel_messages(sl.C_GENERAL, thread_ts=root.ts, by_bot=True)
            if m.text.startswith("*Code*")
        ]
        # What the user sees says the run did not finish, and why.
        assert progress, answer.text
        assert "ok in" not in progress[-1]
        assert re.search(r"killed|engine|lost|restart|stopped", progress[-1] + answer.text)
    model.responder = original
    await asyncio.gather(*(bot.mention(threads[task - 6], task) for task in range(6, 12)))
    await bot.server.wait_for(lambda: all(len(bot.answers(root)) == 2 for root in threads), 300)
    for number, root in enumerate(threads):
        assert bot.answers(root)[-1].text.endswith(f"finished: result {(number + 6) * 2}")


async def test_with_storage_down_answers_still_go_out_and_artifacts_are_marked_failed(
    deploy: Callable[..., Awaitable[Deployment]], model: ScriptedModel
) -> None:
    model.responder = by_task(chart=True)
    # Azurite's address, with nothing listening there: a storage outage.
    down = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint=http://127.0.0.1:{free_port()}/{ACCOUNT};"
    )
    storage = AzureBlobStorage("cellmate", connection_string=down)
    bot = await deploy(storage=storage)
    threads = await roots(bot.server, 5)
    await asyncio.gather(*(bot.mention(threads[task], task) for task in range(5)))
    await bot.server.wait_for(lambda: all(bot.answers(root) for root in threads), 300)
    for number, root in enumerate(threads):
        assert bot.answers(root)[0].text.endswith(f"finished: result {number * 2}")
    # The charts still reach the threads (uploaded to Slack directly), and count as failed.
    assert len([f for f in bot.server.files if f.name.endswith(".png")]) == 5
    assert 'cellmate_artifacts_total{status="failed"} 5.0' in bot.metrics.exposition().decode()
    await storage.close()
