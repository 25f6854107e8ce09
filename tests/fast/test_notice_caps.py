"""A turn's notices stay within one message whatever a workspace holds: a variable name of
400,000 characters, thousands of variables, a failure reason of 400,000 characters, or
names with line breaks, backticks, markdown and mentions. Driven like a user would on
Discord and Slack (stand-in servers, the real clients) and the console, on the fake sandbox.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from bench.standins.discord_server import ALICE
from bench.standins.discord_server import Message as DiscordMessage
from bench.standins.slack_server import C_GENERAL
from bench.standins.slack_server import Message as SlackMessage
from bot.agent import Agent
from bot.workspaces import StoredWorkspaces
from executor import Executor
from executor.errors import WorkspaceError
from executor.fake_backend import FakeBackend, FakeRun
from executor.workspace import WorkspaceSettings, WorkspaceStore
from storage.local import LocalStorage
from tests.fast import test_discord_turns, test_slack_turns
from tests.fast.restore_fixtures import end_sessions
from tests.fast.test_console_turns import Chat
from tests.support import on_discord, on_slack

HUGE = "a" * 400_000
MARKED = [
    "line\nbreak",
    "```",
    "**bold**",
    "@everyone",
    "@here",
    "<!channel>",
    "<@U0ALICE>",
    "<@123456789012345678>",
    "[click](http://127.0.0.1/)",
]
SAVE = "keep = 1"
AGAIN = "again()"


@dataclasses.dataclass(frozen=True)
class Variant:
    run: FakeRun
    says: tuple[str, ...]
    """What the turn's notice still says."""
    auto_restore: bool = True
    save_fails: str = ""


VARIANTS = {
    "huge name": Variant(
        FakeRun(assigns={HUGE: "1", "x": "2"}),
        ("Restored your workspace from a moment ago: aaaa", "(400,000 characters)", ", x"),
    ),
    "thousands of variables": Variant(
        FakeRun(assigns={f"v{i}": "1" for i in range(5000)}),
        ("Restored your workspace from a moment ago: v0, v1", "more"),
    ),
    "huge unsaved name": Variant(
        FakeRun(unsaveable=[HUGE]),
        ("not restored: aaaa", "(400,000 characters) (an open connection)"),
    ),
    "huge failure reason": Variant(
        FakeRun(assigns={"x": "1"}),
        ("Your workspace could not be saved when the last session ended (the disk said: rrr",),
        save_fails="the disk said: " + "r" * 400_000,
    ),
    "saved, not restored": Variant(
        FakeRun(assigns={HUGE: "1", **{f"v{i}": "1" for i in range(3000)}}),
        ("A workspace from a moment ago is saved (",),
        auto_restore=False,
    ),
    "names with marks": Variant(
        FakeRun(assigns={name: "1" for name in MARKED}),
        ("Restored your workspace from a moment ago: ", "line\\nbreak"),
    ),
}


class FailingSaves(StoredWorkspaces):
    """The sealed store, whose saves fail with a given (long) reason."""

    reason = ""

    async def save(self, key: str, data: bytes) -> None:
        if self.reason:
            raise WorkspaceError(self.reason)
        await super().save(key, data)


@pytest.fixture(params=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> Variant:
    return VARIANTS[str(request.param)]


@pytest.fixture
def fake_backend(variant: Variant) -> FakeBackend:
    return FakeBackend({SAVE: variant.run, AGAIN: FakeRun()})


@pytest.fixture
def workspaces(tmp_path: Path, variant: Variant) -> WorkspaceStore:
    secret = b"n" * 32
    store = FailingSaves(LocalStorage(tmp_path / "ws", secret), secret, timedelta(days=1))
    store.reason = variant.save_fails
    return store


@pytest.fixture
def workspace_settings(variant: Variant) -> WorkspaceSettings:
    return WorkspaceSettings(auto_restore=variant.auto_restore)


sandbox_limits = test_discord_turns.sandbox_limits


def _assert_safe(text: str, platform: str) -> None:
    """Nothing in a notice pings, links, opens a block or starts a line of its own: Discord
    pings with `@everyone`, `@here` and `<@id>`, Slack with `<!...>` and `<@...>`."""
    if platform == "discord":
        assert not re.search(r"@everyone|@here|<@\d+>", text)
        assert not re.search(r"(?<!\\)\*\*bold|(?<!\\)\[click\]\(", text)
    else:
        assert "<!channel>" not in text
        assert "<@U0ALICE>" not in text
    assert "```" not in text
    assert "line\nbreak" not in text


# ── Discord ────────────────────────────────────────────────────────────────────────────────

discord_start_bot = test_discord_turns.start_bot


@pytest.mark.timeout(90)
async def test_discord_notices_take_one_message(
    discord_start_bot: Callable[..., Awaitable[on_discord.Bot]],
    fake_executor: Executor,
    variant: Variant,
) -> None:
    bot = await discord_start_bot(use_model=False)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, f"```py\n{SAVE}\n```")
    before = len(await bot.answer_in(dm))
    await end_sessions(fake_executor)
    await bot.server.post_message(dm, f"```py\n{AGAIN}\n```")

    def noticed() -> list[DiscordMessage] | None:
        messages = bot.bot_messages(dm)
        idle = not bot.client.conversations.turns and not bot.client.door.lines.busy
        done = idle and any(m.content.startswith("ℹ️") for m in messages[before:])
        return messages[before:] if done else None

    turn = await bot.server.wait_for(noticed, 30)
    assert isinstance(turn, list)
    assert len(turn) == 2, [m.content[:80] for m in turn]  # the run report and one notice
    report, notice = turn
    assert report.content.startswith("**Code**")
    assert "✅ ok" in report.content
    assert all(len(m.content) <= 2000 for m in turn)
    shown = re.sub(r"\\([\\*_`~|>\[\]()#-])", r"\1", notice.content)  # as Discord draws it
    for words in variant.says:
        assert words in shown
    _assert_safe(notice.content, "discord")
    _assert_safe(report.content.rpartition("```")[2], "discord")  # the status line after the code


# ── Slack ──────────────────────────────────────────────────────────────────────────────────

slack_start_bot = test_slack_turns.start_bot
mode = test_slack_turns.mode


@pytest.mark.timeout(90)
async def test_slack_notices_take_one_post(
    slack_start_bot: Callable[..., Awaitable[on_slack.Bot]],
    fake_executor: Executor,
    variant: Variant,
) -> None:
    bot = await slack_start_bot(use_model=False)
    asked, _ = await bot.server.post(C_GENERAL, f"```\n{SAVE}\n```", mention_bot=True)
    before = len(await bot.answered(C_GENERAL, asked.ts))
    await end_sessions(fake_executor)
    await bot.server.post(C_GENERAL, f"```\n{AGAIN}\n```", thread_ts=asked.ts)

    def noticed() -> list[SlackMessage] | None:
        messages = bot.thread(C_GENERAL, asked.ts)
        idle = not bot.slack.conversations.turns and not bot.slack.door.lines.busy
        done = idle and any(m.text.startswith(":information_source:") for m in messages[before:])
        return messages[before:] if done else None

    turn = await bot.server.wait_for(noticed, 30)
    assert isinstance(turn, list)
    assert len(turn) == 2, [m.text[:80] for m in turn]  # the run report and one notice
    report, notice = turn
    assert report.text.startswith("*Code*")
    assert "ok in" in report.text
    assert all(len(m.text) <= 3000 for m in turn)
    shown = notice.text.replace("\u200b", "").replace("&lt;", "<").replace("&gt;", ">")
    for words in variant.says:
        assert words.replace("```", "") in shown
    _assert_safe(notice.text, "slack")
    _assert_safe(report.text.rpartition("```")[2], "slack")  # the status line after the code


# ── console ────────────────────────────────────────────────────────────────────────────────


@pytest.mark.timeout(90)
async def test_console_notes_stay_short(
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
    variant: Variant,
) -> None:
    console = Chat(make_agent(fake_executor, None, tmp_path), tmp_path)
    await console.pipe(f"/run {SAVE}")
    await end_sessions(fake_executor)
    out = await console.pipe(f"/run {AGAIN}")
    assert len(out) < 2000, out[:300]
    status = [line for line in out.splitlines() if line.startswith("✓ ok in")]
    assert len(status) == 1
    for words in variant.says:
        assert words in status[0]
    assert "line\nbreak" not in out
