"""The production deployment, run: the README's Compose commands bring up the bot, the
Docker API proxy and Azurite from images built on this machine, and the bot answers a
Discord mention and a signed Slack event (HTTP mode) end to end through the containers,
keeps a conversation's history and workspace across `restart bot`, and `down` leaves no
sandbox behind.

Discord, Slack and the model are the tests' stand-in servers, reached by the containers at
the host's address on the compose network this test creates (tests/compose/relay.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from azure.storage.blob import BlobServiceClient

from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from bench.standins.openai_server import Reply, runs, says
from bench.standins.ports import free_port
from tests.compose.relay import (
    ComposeDiscord,
    ComposeModel,
    ComposeSlack,
    Relay,
    relay_each,
    stand_in_settings,
    user_text,
)
from tests.compose.stack import Stack, healthy
from tests.support.azurite import ACCOUNT, KEY
from tests.support.platforms import PNG
from tests.support.sandboxes import TEST_INSTANCE, live_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

CHUNK_S = 15.0
AFTER_TURN_S = 30.0
TURN_CAP_S = 420.0
PROJECT = f"cellmate-{TEST_INSTANCE}-compose"
CHART = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('compose')\nplt.show()\n"
SOCKET_PROBE = (
    "import socket\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect('/var/run/docker.sock')\n"
    "    print('reached')\n"
    "except OSError as exc:\n"
    "    print('refused', type(exc).__name__)\n"
)


def respond(body: dict[str, Any]) -> Reply:
    """The model: runs the code each request asks for, then says it is done."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says("Done, see above.")
    text = user_text(last)
    if "chart" in text:
        return runs(CHART)
    if "keep" in text:
        return runs("x = 41\nprint('kept', x)")
    if "add one" in text:
        return runs("print('x plus one is', x + 1)")
    return says("I did not understand.")


@pytest.fixture
def stack(tmp_path: Path, images: None) -> Iterator[Stack]:
    made = Stack(tmp_path / PROJECT, PROJECT)
    made.run("--profile", "dev", "--profile", "setup", "down", "-v", "--remove-orphans")
    yield made
    made.run("--profile", "dev", "--profile", "setup", "down", "-v", "--remove-orphans")


def azurite_pngs(port: int) -> list[bytes]:
    service = BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )
    try:
        container = service.get_container_client("cellmate")
        if not container.exists():
            return []
        return [
            container.download_blob(blob.name).readall()
            for blob in container.list_blobs()
            if blob.name.endswith(".png")
        ]
    finally:
        service.close()


def slack_texts(server: sl.SlackServer, root: str) -> list[str]:
    return [m.text for m in server.channel_messages(sl.C_GENERAL, thread_ts=root, by_bot=True)]


def answers(server: sl.SlackServer, root: str) -> int:
    return sum("Done, see above." in text for text in slack_texts(server, root))


def turns_finished(stack: Stack) -> int:
    return stack.run("logs", "--no-color", "bot", timeout=60).count("turn finished")


async def answered(
    stack: Stack,
    side: ComposeDiscord | ComposeSlack,
    predicate: Callable[[], object],
    turns_before: int,
) -> None:
    """Wait for `predicate` as long as the bot is still working on the turn: on a loaded
    machine a sandbox's start and run can take minutes, so the deadline follows the bot's
    own "turn finished" line (then the answer has `AFTER_TURN_S` to arrive), with
    `TURN_CAP_S` as the outer bound."""
    waited, finished_at = 0.0, None
    while True:
        try:
            await side.wait_for(predicate, CHUNK_S)
            return
        except AssertionError:
            waited += CHUNK_S
            if finished_at is None and turns_finished(stack) > turns_before:
                finished_at = waited
            if waited >= TURN_CAP_S or (
                finished_at is not None and waited - finished_at >= AFTER_TURN_S
            ):
                raise


async def test_the_compose_stack_serves_discord_and_slack_and_survives_a_restart(
    stack: Stack,
) -> None:
    http_port, azurite_port = free_port(), free_port()
    settings = {
        "CELLMATE_INSTANCE": PROJECT,
        "CELLMATE_PUBLISH_ADDRESS": "127.0.0.1",
        "CELLMATE_HTTP_PORT": str(http_port),
        "CELLMATE_AZURITE_PORT": str(azurite_port),
        "CELLMATE_NETWORK_CONTROL_PORT": str(free_port()),  # published even with doors off
        "CELLMATE_POOL_SIZE": "1",
        "CELLMATE_DISCORD_COOLDOWN_S": "0",
        "CELLMATE_SLACK_COOLDOWN_S": "0",
        "CELLMATE_SHUTDOWN_GRACE_S": "10",
        "AZURE_STORAGE_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint=http://azurite:10000/{ACCOUNT};"
        ),
    }
    stack.write_env(**settings)
    discord_side, slack_side, model = ComposeDiscord(), ComposeSlack(mode="http"), ComposeModel()
    relays: list[Relay] = []
    try:
        # The README's order: Azurite, then the bot (which creates its container in Azurite).
        stack.run("--profile", "dev", "up", "-d", "azurite")
        gateway = stack.gateway()
        model.responder = respond
        await model.start()
        await discord_side.start()
        await slack_side.start()
        relays += await relay_each(gateway, model, discord_side, slack_side)
        slack_side.bot_url = f"http://127.0.0.1:{http_port}/slack/events"
        stack.write_env(**settings, **stand_in_settings(model, slack_side, discord_side))
        stack.run("up", "-d")
        await check_the_stack(stack, discord_side, slack_side, model, http_port, azurite_port)
    except AssertionError as failed:
        # The bot's own account of what went wrong, in the report's first lines.
        bot_said = "\n".join(
            line for line in stack.logs().splitlines() if line.startswith(("bot", "docker-proxy"))
        )[-6000:]
        raise AssertionError(
            f"{failed}\n--- the bot's and the proxy's last log lines ---\n{bot_said}"
        ) from None
    except BaseException:
        print(stack.logs())
        raise
    finally:
        for relay in relays:
            await relay.close()
        await discord_side.close()
        await slack_side.close()
        await model.stop()


async def check_the_stack(
    stack: Stack,
    discord_side: ComposeDiscord,
    slack_side: ComposeSlack,
    model: ComposeModel,
    http_port: int,
    azurite_port: int,
) -> None:
    health = await healthy(f"http://127.0.0.1:{http_port}/healthz")
    assert health["checks"]["discord"] == "ok", health
    assert health["checks"]["slack"] == "ok", health

    # The bot runs as the README says, and only the proxy holds the Docker socket.
    bot = stack.inspect("bot")
    assert bot["Config"]["User"] == "cellmate"
    assert bot["HostConfig"]["ReadonlyRootfs"] is True
    assert bot["HostConfig"]["CapDrop"] == ["ALL"]
    assert "/tmp" in bot["HostConfig"]["Tmpfs"]
    assert "no-new-privileges:true" in bot["HostConfig"]["SecurityOpt"]
    assert not any("docker.sock" in m["Source"] for m in bot["Mounts"])
    proxy = stack.inspect("docker-proxy")
    assert any("docker.sock" in m["Source"] for m in proxy["Mounts"])
    assert proxy["HostConfig"]["ReadonlyRootfs"] is True
    assert proxy["HostConfig"]["CapDrop"] == ["ALL"]
    probe = stack.run("exec", "-T", "bot", "python", "-c", SOCKET_PROBE)
    assert probe.strip() == "refused FileNotFoundError", probe

    # A Discord mention: the answer, with the chart attached and published to Azurite.
    await discord_side.wait_ready(60)
    turns = turns_finished(stack)
    await discord_side.post_message(dc.CHANNEL_GENERAL, "draw a chart", mention_bot=True)

    def discord_answer() -> dc.Message | None:
        for thread in discord_side.threads:
            for message in discord_side.channel_messages(thread, by_bot=True):
                if "Done, see above." in message.content:
                    return message
        return None

    await answered(stack, discord_side, discord_answer, turns)
    charts = [
        a
        for message in discord_side.messages.values()
        if message.author_id == dc.BOT_ID
        for a in message.attachments
        if a.name.endswith(".png")
    ]
    assert charts, discord_side.summary()
    assert charts[0].content.startswith(PNG)
    stored = azurite_pngs(azurite_port)
    assert len(stored) == 1
    assert stored[0] == charts[0].content

    # A signed Slack event (HTTP mode) on the published port: the same, in a thread.
    turns = turns_finished(stack)
    asked, deliveries = await slack_side.post(sl.C_GENERAL, "draw a chart", mention_bot=True)
    assert all(d.status == 200 for d in deliveries)
    await answered(
        stack, slack_side, lambda: "Done, see above." in slack_texts(slack_side, asked.ts), turns
    )
    slack_charts = [f for f in slack_side.files if f.name.endswith(".png")]
    assert slack_charts
    assert slack_charts[0].thread_ts == asked.ts
    assert len(azurite_pngs(azurite_port)) == 2

    # A variable in the thread's session, then a restart of the bot.
    turns = turns_finished(stack)
    await slack_side.post(sl.C_GENERAL, "keep x", thread_ts=asked.ts, mention_bot=True)
    await answered(stack, slack_side, lambda: answers(slack_side, asked.ts) == 2, turns)
    assert any("kept 41" in text for text in slack_texts(slack_side, asked.ts))
    stack.run("restart", "bot", timeout=120)
    await healthy(f"http://127.0.0.1:{http_port}/healthz")

    # The conversation goes on: the model sees its history, the session its workspace.
    turns = turns_finished(stack)
    await slack_side.post(sl.C_GENERAL, "add one to it", thread_ts=asked.ts, mention_bot=True)
    await answered(stack, slack_side, lambda: answers(slack_side, asked.ts) == 3, turns)
    texts = slack_texts(slack_side, asked.ts)
    assert any("x plus one is 42" in text for text in texts), texts
    assert any("Restored your workspace" in text for text in texts), texts
    last_request = next(r for r in model.requests if "add one" in user_text(r["messages"][-1]))
    earlier = [user_text(m) for m in last_request["messages"] if m["role"] == "user"]
    assert any("keep x" in text for text in earlier), earlier

    # Docker's own health checks agree (they first run 30 s after the start).
    client = docker.from_env()
    try:
        for service in ("bot", "docker-proxy"):
            container = client.containers.get(stack.container_id(service))
            deadline = time.monotonic() + 90
            while container.attrs["State"]["Health"]["Status"] != "healthy":
                assert time.monotonic() < deadline, container.attrs["State"]["Health"]
                await asyncio.sleep(2)
                container.reload()

        # `down` stops the bot, which removes its sandboxes; nothing of the project stays
        # but its volumes.
        assert live_sandboxes(client, PROJECT), "the bot keeps a warm sandbox while it runs"
        stack.run("--profile", "dev", "down", timeout=150)
        assert live_sandboxes(client, PROJECT) == []
    finally:
        client.close()
    assert [name for name in stack.leftovers() if not name.startswith("volume")] == []
