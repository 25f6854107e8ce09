"""Network doors in the Compose stack (`CELLMATE_NETWORK=allowlist`, `--profile allowlist`):
the egress proxy runs beside the engine on the host's network, listens on the gateway of the
sandbox network the bot makes, and connects to the bot's control port with the token from
.env. A Slack thread then fetches from a door the operator opened, and is refused at one
nobody opened, with the card for approvers; the target is a listener in a network namespace
the test creates and joins to this host, and nothing else is reached."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from bench.standins import slack_server as sl
from bench.standins.doors import guarded_network
from bench.standins.netns import listening_in, namespace
from bench.standins.openai_server import Reply, runs, says
from bench.standins.ports import free_port
from tests.compose.relay import (
    ComposeModel,
    ComposeSlack,
    Relay,
    relay_each,
    stand_in_settings,
)
from tests.compose.stack import Stack, healthy
from tests.support.sandboxes import TEST_INSTANCE, live_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.timeout(900)]

PROJECT = f"cellmate-{TEST_INSTANCE}-doors"
TOKEN = "compose-" + "9" * 40
PROFILES = ("--profile", "allowlist")
FETCH = """
import urllib.request, urllib.error
try:
    got = urllib.request.urlopen('URL', timeout=20)
    print('fetched', got.status, len(got.read()))
except urllib.error.HTTPError as exc:
    print('refused', exc.code, exc.read().decode()[:200])
"""


def respond(body: dict[str, Any]) -> Reply:
    """The model: fetches the URL a message ends with, then says it is done."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says("Done, see above.")
    content = last.get("content") or ""
    text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    if "fetch" in text:
        return runs(FETCH.replace("URL", text.split()[-1]))
    return says("I did not understand.")


@pytest.fixture
def stack(tmp_path: Path, images: None) -> Iterator[Stack]:
    made = Stack(tmp_path / PROJECT, PROJECT)
    made.run(*PROFILES, "down", "-v", "--remove-orphans")
    yield made
    made.run(*PROFILES, "down", "-v", "--remove-orphans")


def answered_with_a_card(texts: list[str]) -> bool:
    return any(t.startswith(":door:") for t in texts) and any(
        "Done, see above." in t for t in texts
    )


def thread_texts(server: sl.SlackServer, root: str) -> list[str]:
    return [m.text for m in server.channel_messages(sl.C_GENERAL, thread_ts=root, by_bot=True)]


async def test_the_compose_proxy_opens_the_operators_door_and_asks_about_others(
    stack: Stack,
) -> None:
    http_port, control_port, closed_port = free_port(), free_port(), free_port()
    slack_side, model = ComposeSlack(mode="http"), ComposeModel()
    relays: list[Relay] = []
    async with (
        namespace() as space,
        listening_in(space) as target,
        guarded_network(PROJECT, 3128),
    ):
        settings = {
            "CELLMATE_INSTANCE": PROJECT,
            "CELLMATE_PUBLISH_ADDRESS": "127.0.0.1",
            "CELLMATE_HTTP_PORT": str(http_port),
            "CELLMATE_SLACK_COOLDOWN_S": "0",
            "CELLMATE_SHUTDOWN_GRACE_S": "10",
            "CELLMATE_NETWORK": "allowlist",
            "CELLMATE_NETWORK_ALLOWED": f"{target.address}:{target.port}",
            "CELLMATE_NETWORK_CONTROL_TOKEN": TOKEN,
            "CELLMATE_NETWORK_CONTROL_PORT": str(control_port),
        }
        try:
            stack.write_env(**settings)
            stack.run("up", "--no-start", "bot")  # the project's network, for the relays
            gateway = stack.gateway()
            model.responder = respond
            await model.start()
            await slack_side.start()
            relays += await relay_each(gateway, model, slack_side)
            slack_side.bot_url = f"http://127.0.0.1:{http_port}/slack/events"
            stack.write_env(**settings, **stand_in_settings(model, slack_side))
            stack.run(*PROFILES, "up", "-d")
            await healthy(f"http://127.0.0.1:{http_port}/healthz")

            # A door the operator opened: through the proxy, from the host's side.
            opened = f"http://{target.address}:{target.port}/open"
            asked, _ = await slack_side.post(sl.C_GENERAL, f"fetch {opened}", mention_bot=True)
            await slack_side.wait_for(
                lambda: any("Done, see above." in t for t in thread_texts(slack_side, asked.ts)),
                180,
            )
            texts = thread_texts(slack_side, asked.ts)
            assert any("fetched 200 1000" in t for t in texts), texts
            (hit,) = await target.wait_for(1)
            assert hit["peer"] == space.host_address  # from the proxy on the host

            # One nobody opened: refused before any connection, and approvers get the card.
            closed = f"http://{target.address}:{closed_port}/closed"
            other, _ = await slack_side.post(sl.C_GENERAL, f"fetch {closed}", mention_bot=True)
            await slack_side.wait_for(
                lambda: answered_with_a_card(thread_texts(slack_side, other.ts)), 180
            )
            texts = thread_texts(slack_side, other.ts)
            assert any("refused 403" in t for t in texts), texts
            assert any("The network refused this run" in t for t in texts), texts
            cards = [t for t in texts if t.startswith(":door:")]
            assert f"{target.address}:{closed_port}" in cards[0], cards
            assert len(target.hits) == 1
        except AssertionError as failed:
            said = "\n".join(
                line
                for line in stack.logs("allowlist").splitlines()
                if line.startswith(("bot", "egress-proxy", "docker-proxy"))
            )[-6000:]
            raise AssertionError(f"{failed}\n--- the stack's last log lines ---\n{said}") from None
        finally:
            for relay in relays:
                await relay.close()
            await slack_side.close()
            await model.stop()
            # Before the network goes: the bot removes its sandboxes as it stops.
            stack.run(*PROFILES, "down", timeout=150)
    assert live_sandboxes_of(PROJECT) == []


def live_sandboxes_of(instance: str) -> list[str]:
    client = docker.from_env()
    try:
        return live_sandboxes(client, instance)
    finally:
        client.close()
