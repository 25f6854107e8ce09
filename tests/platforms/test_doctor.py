"""`cellmate doctor` against the real engine and image, the test Discord and Slack servers and
the scripted model: all good, then wrong tokens and a missing image."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from bench.standins.openai_server import ScriptedModel
from tests.support.platforms import cli_environment

pytestmark = pytest.mark.docker


@pytest.fixture
async def platforms() -> AsyncIterator[tuple[dc.DiscordServer, sl.SlackServer]]:
    discord_side, slack_side = dc.DiscordServer(), sl.SlackServer(mode="socket")
    await discord_side.start()
    await slack_side.start()
    yield discord_side, slack_side
    await discord_side.close()
    await slack_side.close()


async def doctor(data: Path, **settings: str) -> tuple[int, str]:
    env = cli_environment(data, **settings)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "doctor",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_doctor_passes_when_everything_is_reachable(
    platforms: tuple[dc.DiscordServer, sl.SlackServer], model: ScriptedModel, tmp_path: Path
) -> None:
    discord_side, slack_side = platforms
    code, out = await doctor(
        tmp_path,
        DISCORD_TOKEN=dc.TOKEN,
        DISCORD_API_URL=discord_side.api_url,
        SLACK_BOT_TOKEN=sl.BOT_TOKEN,
        SLACK_APP_TOKEN=sl.APP_TOKEN,
        SLACK_API_URL=slack_side.api_url,
        OPENAI_BASE_URL=model.base_url,
        OPENAI_API_KEY="test-key",
    )
    assert code == 0, out
    for name in ("engine", "image", "runtime", "storage", "model", "discord", "slack"):
        assert any(line.startswith(f"✓ {name}") for line in out.splitlines()), (name, out)
    assert "Socket Mode: the app-level token works" in out
    assert "All required checks passed." in out
    assert dc.TOKEN not in out
    assert sl.BOT_TOKEN not in out


async def test_doctor_says_what_is_wrong_and_how_to_fix_it(
    platforms: tuple[dc.DiscordServer, sl.SlackServer], tmp_path: Path
) -> None:
    discord_side, slack_side = platforms
    code, out = await doctor(
        tmp_path,
        DISCORD_TOKEN="not-the-token",  # noqa: S106 - a wrong token on purpose
        DISCORD_API_URL=discord_side.api_url,
        SLACK_BOT_TOKEN="xoxb-wrong",  # noqa: S106 - a wrong token on purpose
        SLACK_API_URL=slack_side.api_url,
        CELLMATE_SANDBOX_IMAGE="cellmate-sandbox:does-not-exist",
    )
    assert code == 1, out
    assert "✗ discord" in out
    assert "Discord refused DISCORD_TOKEN" in out
    assert "✗ slack " in out or "✗ slack" in out
    assert "Slack refused SLACK_BOT_TOKEN (invalid_auth)" in out
    assert "HTTP mode needs SLACK_SIGNING_SECRET" in out
    assert "✗ image" in out
    assert "cellmate build-image" in out
    assert "! model" in out or "✓ model" in out  # not configured is allowed
    assert "problem(s)" in out


def _host_rules_in_place() -> bool:
    rule = ["iptables", "-w", "-C", "INPUT", "-i", "cellmate-+", "-j", "CM-cellmate-ALL"]
    return subprocess.run(rule, capture_output=True, check=False).returncode == 0


async def test_doctor_checks_what_network_doors_need(tmp_path: Path) -> None:
    code, out = await doctor(
        tmp_path, CELLMATE_NETWORK="allowlist", CELLMATE_SANDBOX_RUNTIME="runsc"
    )
    lines = out.splitlines()
    assert "✓ network     runsc-net is registered for allowlist mode" in lines, out
    assert "✓ proxy       mitmproxy is installed; the bot starts the proxy" in lines, out
    # The machine-wide rules are the operator's to install (tests keep to their own bridges):
    # the doctor says which state they are in, and how to fix a missing one.
    if _host_rules_in_place():
        assert "✓ host rules  sandbox bridges reach only port 3128 of this host" in lines, out
    else:
        assert any(line.startswith("✗ host rules  no host rules keep") for line in lines), out
        assert "run scripts/guard-sandbox-network.sh add 3128 as root" in out
        assert code == 1
