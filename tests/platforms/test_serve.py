"""`cellmate serve` as an operator runs it: one process serving Discord and Slack (HTTP
mode) from settings in the environment, answering on both, reporting health and metrics,
logging JSON without secrets, and on SIGTERM letting a short turn finish, stopping a long
one with a message, telling a background run's thread it was stopped (while Discord can
still be posted to), and leaving no sandbox behind."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from bench.standins.ports import free_port
from bot.conversations.background import STOPPED_FOR_SHUTDOWN
from executor import default_tag
from executor.docker_backend import DockerBackend
from tests.integration.conftest import TEST_INSTANCE
from tests.support.platforms import cli_environment
from tests.support.sandboxes import assert_no_sandbox_left

pytestmark = pytest.mark.docker

INSTANCE = f"{TEST_INSTANCE}-serve"


def discord_text(server: dc.DiscordServer, text: str) -> bool:
    return any(
        text in m.content
        for thread in server.threads
        for m in server.channel_messages(thread, by_bot=True)
    )


def slack_text(server: sl.SlackServer, root: str, text: str) -> bool:
    return any(
        text in m.text for m in server.channel_messages(sl.C_GENERAL, thread_ts=root, by_bot=True)
    )


async def get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url) as response:
        body: dict[str, Any] = await response.json()
        return body


async def test_serve_answers_on_discord_and_slack_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    discord_side = dc.DiscordServer()
    slack_side = sl.SlackServer(mode="http")
    await discord_side.start()
    await slack_side.start()
    port = free_port()
    slack_side.bot_url = f"http://127.0.0.1:{port}/slack/events"
    env = cli_environment(
        tmp_path / "data",
        INSTANCE,
        DISCORD_TOKEN=dc.TOKEN,
        DISCORD_API_URL=discord_side.api_url,
        CELLMATE_DISCORD_COOLDOWN_S="0",
        CELLMATE_SLACK_COOLDOWN_S="0",
        SLACK_BOT_TOKEN=sl.BOT_TOKEN,
        SLACK_SIGNING_SECRET=sl.SIGNING_SECRET,
        SLACK_API_URL=slack_side.api_url,
        CELLMATE_HTTP_PORT=str(port),
        CELLMATE_POOL_SIZE="1",
        CELLMATE_LOG_FORMAT="json",
        CELLMATE_SHUTDOWN_GRACE_S="4",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "serve",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    output: list[str] = []

    async def read() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            output.append(line.decode())

    reader = asyncio.create_task(read())
    try:
        await discord_side.wait_for(lambda: any("serving" in line for line in output), 120)
        assert "Discord, Slack" in "".join(output)
        await discord_side.wait_ready()

        await discord_side.post_message(
            dc.CHANNEL_GENERAL, "```py\nprint('from', 'discord')\n```", mention_bot=True
        )
        asked, _ = await slack_side.post(
            sl.C_GENERAL, "```\nprint('from', 'slack')\n```", mention_bot=True
        )
        await discord_side.wait_for(lambda: discord_text(discord_side, "from discord"), 60)
        await slack_side.wait_for(lambda: slack_text(slack_side, asked.ts, "from slack"), 60)

        # A reply is on screen a moment before its turn is counted as answered.
        counted = (
            'cellmate_turns_total{outcome="answer",platform="discord"} 1.0',
            'cellmate_turns_total{outcome="answer",platform="slack"} 1.0',
        )
        async with aiohttp.ClientSession() as session:
            health = await get_json(session, f"http://127.0.0.1:{port}/healthz")
            deadline = time.monotonic() + 30
            while True:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    metrics = await response.text()
                if all(line in metrics for line in counted) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
        assert health["status"] == "ok", health
        assert health["checks"]["discord"] == "ok"
        assert health["checks"]["slack"] == "ok"
        assert 'cellmate_turns_total{outcome="answer",platform="discord"} 1.0' in metrics
        assert 'cellmate_turns_total{outcome="answer",platform="slack"} 1.0' in metrics
        assert 'cellmate_runs_total{status="ok"} 2.0' in metrics

        # A turn that ends within the grace period, and one that would never end.
        await discord_side.post_message(
            dc.CHANNEL_GENERAL,
            "```py\nimport time\nprint('sta' + 'rted', flush=True)\n"
            "time.sleep(1.5)\nprint('made ' + 'it')\n```",
            mention_bot=True,
        )
        long, _ = await slack_side.post(
            sl.C_GENERAL,
            "```\nimport time\nprint('lo' + 'oping', flush=True)\ntime.sleep(600)\n```",
            mention_bot=True,
        )
        await discord_side.post_message(
            dc.CHANNEL_GENERAL,
            "/run --background import time; print('in the ' + 'background', flush=True); "
            "time.sleep(600)",
            mention_bot=True,
        )
        await discord_side.wait_for(lambda: discord_text(discord_side, "started"), 60)
        await slack_side.wait_for(lambda: slack_text(slack_side, long.ts, "looping"), 60)
        await discord_side.wait_for(lambda: discord_text(discord_side, "in the background"), 60)
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 60)
        await reader
        assert code == 0, "".join(output)
        assert discord_text(discord_side, "made it")
        assert slack_text(slack_side, long.ts, "Cellmate is restarting, so this turn was stopped")
        assert discord_text(discord_side, STOPPED_FOR_SHUTDOWN)
        logged = [json.loads(line) for line in output if line.startswith("{")]
        assert any(entry.get("conversation", "").startswith("slack:") for entry in logged)
        for secret in (dc.TOKEN, sl.BOT_TOKEN, sl.SIGNING_SECRET):
            assert secret not in "".join(output)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
            # A bot killed mid-test leaves its sandboxes for its next start to sweep; this
            # instance has no next start, so the test sweeps them.
            backend = DockerBackend(default_tag(), instance=INSTANCE)
            await backend.remove_leftovers()
            await backend.close()
        reader.cancel()
        await discord_side.close()
        await slack_side.close()
    assert_no_sandbox_left(INSTANCE)
