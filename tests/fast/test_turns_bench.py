"""`python -m bench turns` measures every figure it reports: its measurement, run with two
samples against the stand-in Slack and Discord servers (and the scripted model, for the
model's first words on Slack) on the fake sandbox. The values are
timings, so only that each is there and positive is checked."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import turns_bench
from bot.agent import Agent
from bot.conversations import Conversations
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun, stdout

PRINTS = re.compile(r"print\('(\w+)', '(\w+)'\)")
KINDS = ("follow_up", "new_thread", "run_command")


def printed(code: str) -> FakeRun | None:
    """What `print('a', 'b')` prints; the bench's samples run nothing else."""
    found = PRINTS.fullmatch(code.strip())
    return FakeRun(outputs=[stdout(f"{found[1]} {found[2]}\n")]) if found else None


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(printed)


async def test_every_figure_is_measured_on_slack_and_discord(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> None:
    conversations = Conversations(make_agent(fake_executor, None, tmp_path))

    figures = await turns_bench.measure(conversations, fake_executor, samples=2, quiet_s=0.1)

    summary = json.loads(json.dumps(figures.summary))
    named = {"turn_follow_up_p50_ms", "turn_new_thread_p50_ms", "turn_run_command_p50_ms"}
    assert named | {"ack_p95_ms"} <= summary.keys()
    timings = {
        f"{platform}{figure}_{kind}_{share}_ms"
        for platform in ("", "discord_")
        for figure in ("turn", "ack")
        for kind in KINDS
        for share in ("p50", "p95")
    } | {f"{platform}ack_{share}_ms" for platform in ("", "discord_") for share in ("p50", "p95")}
    assert timings <= summary.keys()
    for key in timings:
        assert isinstance(summary[key], float), key
        assert summary[key] > 0, key
    assert [count for *_, count in figures.rows] == [2] * 15
    assert summary["mcp_run_code_p50_ms"] > 0
    first_words = {
        f"first_words_{kind}_{share}_ms"
        for kind in ("streamed", "edited")
        for share in ("p50", "p95")
    }
    assert first_words <= summary.keys()
    assert all(summary[key] > 0 for key in first_words)
    calls = summary["discord_ack_calls"]
    assert calls["run_command"] == "POST /interactions/{id}/{token}/callback"
    assert calls["new_thread"] == "POST /channels/{id}/messages/{id}/threads"
    assert fake_executor.sessions.active == []
