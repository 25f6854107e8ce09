"""Cellmate installed to a person's Discord account, as people see it: `/run` and the Run
with Cellmate message command in a server the bot is not in, a group DM and a DM between
people answer through the interaction only (code, output, status, the chart as a follow-up,
Stop and Re-run on it), never as a channel message nor in a thread; user installs are off
unless switched on, and limited to the people named; where the bot is in the server, that
server's code policy wins; quotas count per person everywhere. The real discord.py client
against the Discord stand-in, on the fake sandbox (no Docker), without a model."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.standins.discord_server import (
    ALICE,
    APP_ID,
    BOB,
    CHANNEL_GENERAL,
    EPHEMERAL,
    FOREIGN_CHANNEL,
    FOREIGN_GUILD,
    GROUP_DM,
    GUILD_ID,
    MAX_USER_INSTALL_FOLLOWUPS,
    OWNER,
    PEOPLE_DM,
    ROLE_MEMBER,
    Interaction,
    Message,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.approval import OFF_REFUSAL
from bot.conversations.policy import Policies, PolicySettings
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.database import Databases
from bot.errors import NOT_HERE, NOT_YOURS
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, image, stdout
from tests.support.on_discord import (
    Bot,
    button_id,
    has_button,
    interaction_reply,
    running_bot,
    text_input_id,
)
from tests.support.prompts import ASK_NAME, ASKING

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
CHART = "plot_sales()"
HANG = "wait_forever()"
QUICK = "print(6 * 7)"
SLOW = "slow()"
KEEP = "secret = 7"
SHOW = "print(secret)"
SLOW_CHART = "slow_chart()"
MENU = "Run with Cellmate"
ELSEWHERE = (FOREIGN_CHANNEL, GROUP_DM, PEOPLE_DM)


@pytest.fixture
def sandbox_limits(request: pytest.FixtureRequest) -> SandboxLimits:
    """20 s, or what a test asks for (indirect parametrization)."""
    return SandboxLimits(timeout_s=getattr(request, "param", 20), interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            QUICK: FakeRun(outputs=[stdout("42\n")]),
            CHART: FakeRun(outputs=[stdout("plotted\n"), image(PNG)], files={"sales.csv": b"1"}),
            HANG: FakeRun(outputs=[stdout("waiting\n")], hang=True),
            SLOW: FakeRun(outputs=[stdout(f"step {n}\n") for n in range(5)], delay_s=0.4),
            KEEP: FakeRun(assigns={"secret": "7"}),
            **ASKING,
            SLOW_CHART: FakeRun(
                outputs=[stdout("step\n"), stdout("more\n"), image(PNG)], delay_s=0.5
            ),
            SHOW: FakeRun(shows="secret"),
        }
    )


@pytest.fixture
async def start_bot(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Bot]]]:
    async with contextlib.AsyncExitStack() as running:

        async def start(quotas: QuotaSettings | None = None, **settings: Any) -> Bot:
            agent = make_agent(fake_executor, None, tmp_path, timeout=5)
            conversations = Conversations(
                agent,
                quotas=None if quotas is None else Quotas(Databases.sqlite(tmp_path), quotas),
                policies=Policies(Databases.sqlite(tmp_path), PolicySettings()),
                background_max_s=20,
            )
            bot = await running.enter_async_context(running_bot(agent, conversations, **settings))
            bot.server.install_app(ALICE)
            bot.server.install_app(BOB)
            return bot

        yield start


# ── helpers ──────────────────────────────────────────────────────────────────────────────────


async def _finished(bot: Bot, interaction: Interaction) -> list[Message]:
    """The messages of a direct run's interaction once its report (with Re-run) is there."""

    def done() -> list[Message] | None:
        shown = _shown(bot, interaction)
        ended = any(has_button(m, "Re-run") for m in shown) and not bot.client.door.lines.busy
        return shown if ended else None

    found = await bot.server.wait_for(done)
    assert isinstance(found, list)
    return found


def _shown(bot: Bot, interaction: Interaction) -> list[Message]:
    return bot.server.interaction_messages(interaction)


def _never_posted_in_channels(bot: Bot) -> None:
    """Where the bot is not, it never tried to post, edit or start a thread outside the
    interactions' own webhooks."""
    tried = [
        (method, path)
        for method, path in bot.server.requests
        if path.startswith("/channels/") and any(str(c) in path for c in ELSEWHERE)
    ]
    assert tried == []
    assert bot.server.threads == {}


# ── tests ────────────────────────────────────────────────────────────────────────────────────


async def test_run_in_a_server_the_bot_is_not_in_answers_with_code_output_and_chart(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(user_install=True)
    interaction = await bot.server.slash("run", {"code": CHART}, channel_id=FOREIGN_CHANNEL)
    assert interaction.raw["guild_id"] == str(FOREIGN_GUILD)
    assert interaction.raw["authorizing_integration_owners"] == {"1": str(ALICE)}
    messages = await _finished(bot, interaction)
    report = messages[0]
    assert report.content.startswith("**Code**")
    assert CHART in report.content
    assert "plotted" in report.content
    assert not report.flags & EPHEMERAL  # shown to the channel, as the person asked
    charts = [a for m in messages for a in m.attachments if a.name.endswith(".png")]
    assert len(charts) == 1
    assert charts[0].content == PNG
    assert len(messages) <= 6  # the response and at most five follow-ups
    _never_posted_in_channels(bot)
    # A one-off conversation of its own: its sandbox is gone with the run.
    await bot.server.wait_for(lambda: not fake_backend.live)


async def test_the_message_command_runs_a_message_of_plain_code_in_a_group_dm(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    code = await bot.server.post_message(GROUP_DM, QUICK, author=BOB)
    interaction = await bot.server.context_menu(MENU, code, user=ALICE)
    assert interaction.raw["context"] == 2
    messages = await _finished(bot, interaction)
    assert "42" in messages[0].content
    # In a DM between two people too, by the other one.
    other = await bot.server.post_message(PEOPLE_DM, f"```py\n{QUICK}\n```", author=ALICE)
    again = await bot.server.context_menu(MENU, other, user=BOB)
    assert "42" in (await _finished(bot, again))[0].content
    _never_posted_in_channels(bot)


async def test_stop_and_re_run_work_on_the_answer_where_the_bot_is_not(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    interaction = await bot.server.slash("run", {"code": HANG}, channel_id=FOREIGN_CHANNEL)
    running = await bot.server.wait_for(
        lambda: next(
            (
                m
                for m in _shown(bot, interaction)
                if "waiting" in m.content and has_button(m, "Stop")
            ),
            None,
        )
    )
    assert isinstance(running, Message)
    # Someone else in that server may not stop it; its author may.
    refused = await bot.server.click(running, button_id(running, "Stop"), user=BOB)
    assert await interaction_reply(bot, refused) == NOT_YOURS
    await bot.server.click(running, button_id(running, "Stop"), user=ALICE)
    messages = await _finished(bot, interaction)
    assert "stopped" in messages[0].content.lower()
    rerun = await bot.server.click(
        bot.server.messages[messages[0].id], button_id(messages[0], "Re-run"), user=ALICE
    )
    await bot.server.wait_for(lambda: any(has_button(m, "Stop") for m in _shown(bot, rerun)))
    stop = next(m for m in _shown(bot, rerun) if has_button(m, "Stop"))
    await bot.server.click(stop, button_id(stop, "Stop"), user=ALICE)
    await _finished(bot, rerun)
    _never_posted_in_channels(bot)


async def test_user_installs_are_off_unless_switched_on_and_then_only_for_the_people_named(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot()
    synced = bot.server.commands[None]
    assert all(command["integration_types"] == [0] for command in synced)
    with pytest.raises(AssertionError, match="no command 'run'"):
        await bot.server.slash("run", {"code": QUICK}, channel_id=FOREIGN_CHANNEL)

    bot = await start_bot(user_install=True, user_install_users=(str(ALICE),))
    offered = {c["name"]: c for c in bot.server.commands[None]}
    assert offered["run"]["integration_types"] == [0, 1]
    assert offered["run"]["contexts"] == [0, 1, 2]
    assert offered[MENU]["integration_types"] == [0, 1]
    assert offered["reset"]["integration_types"] == [0]
    refused = await bot.server.slash("run", {"code": QUICK}, channel_id=GROUP_DM, user=BOB)
    assert await interaction_reply(bot, refused) == NOT_HERE
    assert all(m.flags & EPHEMERAL for m in _shown(bot, refused))
    allowed = await bot.server.slash("run", {"code": QUICK}, channel_id=GROUP_DM, user=ALICE)
    assert "42" in (await _finished(bot, allowed))[0].content


async def test_where_the_bot_is_in_the_server_its_policy_wins(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    setting = await bot.server.slash(
        "policy", {"mode": "off", "scope": "server"}, channel_id=CHANNEL_GENERAL, user=OWNER
    )
    assert "now off" in await interaction_reply(bot, setting)
    there = await bot.server.slash("run", {"code": QUICK}, channel_id=CHANNEL_GENERAL)
    assert there.raw["authorizing_integration_owners"] == {"0": str(GUILD_ID), "1": str(ALICE)}
    assert await interaction_reply(bot, there) == OFF_REFUSAL
    elsewhere = await bot.server.slash("run", {"code": QUICK}, channel_id=FOREIGN_CHANNEL)
    assert "42" in (await _finished(bot, elsewhere))[0].content


async def test_an_allowlist_admits_a_user_install_only_for_people_it_admits_somewhere(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    # Only Alice holds ROLE_MEMBER in the bot's server: Bob, who installed the app too, is
    # refused where the bot is not, as his DM to the bot would be.
    bot = await start_bot(user_install=True, roles=(str(ROLE_MEMBER),))
    refused = await bot.server.slash("run", {"code": QUICK}, channel_id=FOREIGN_CHANNEL, user=BOB)
    assert await interaction_reply(bot, refused) == NOT_HERE
    allowed = await bot.server.slash("run", {"code": QUICK}, channel_id=FOREIGN_CHANNEL)
    assert "42" in (await _finished(bot, allowed))[0].content


async def test_quotas_count_per_person_wherever_they_run(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(QuotaSettings(user_runs_per_hour=1), user_install=True)
    first = await bot.server.slash("run", {"code": QUICK}, channel_id=GROUP_DM)
    await _finished(bot, first)
    again = await bot.server.slash("run", {"code": QUICK}, channel_id=FOREIGN_CHANNEL)
    assert "limit of 1 runs per hour" in await interaction_reply(bot, again)
    there = await bot.server.slash("run", {"code": QUICK}, channel_id=CHANNEL_GENERAL)
    assert "limit of 1 runs per hour" in await interaction_reply(bot, there)
    other = await bot.server.slash("run", {"code": QUICK}, channel_id=FOREIGN_CHANNEL, user=BOB)
    assert "42" in (await _finished(bot, other))[0].content


async def test_background_is_refused_where_the_bot_cannot_post_later(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    asked = await bot.server.slash(
        "run", {"code": QUICK, "background": True}, channel_id=FOREIGN_CHANNEL
    )
    assert "cannot go on in the background here" in await interaction_reply(bot, asked)
    _never_posted_in_channels(bot)


async def test_a_run_there_is_one_off_and_offers_no_keep_running(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    dm = await bot.server.dm_channel(ALICE)
    await bot.server.post_message(dm, f"```py\n{KEEP}\n```")
    await bot.answer_in(dm)
    # Alice's DM with the bot keeps `secret`; what she runs in the group DM does not see it.
    shown = await bot.server.slash("run", {"code": SHOW}, channel_id=GROUP_DM)
    assert "NameError" in (await _finished(bot, shown))[0].content
    in_dm = await bot.server.slash("run", {"code": SHOW}, channel_id=dm)
    assert "7" in (await _finished(bot, in_dm))[0].content
    # Runs there cannot go on in the background: Stop, and no Keep running.
    hanging = await bot.server.slash("run", {"code": HANG}, channel_id=FOREIGN_CHANNEL)
    running = await bot.server.wait_for(
        lambda: next((m for m in _shown(bot, hanging) if has_button(m, "Stop")), None)
    )
    assert isinstance(running, Message)
    assert not has_button(running, "Keep running")
    await bot.server.click(running, button_id(running, "Stop"), user=ALICE)
    await _finished(bot, hanging)


@pytest.mark.parametrize("sandbox_limits", [1], indirect=True)
async def test_a_run_there_ends_at_its_limit_rather_than_in_the_background(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    interaction = await bot.server.slash("run", {"code": SLOW}, channel_id=FOREIGN_CHANNEL)
    messages = await _finished(bot, interaction)
    assert "step 0" in messages[0].content
    assert not any("background" in m.content for m in messages)
    _never_posted_in_channels(bot)


async def test_after_the_interaction_expires_nothing_is_posted_in_the_channel(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    interaction = await bot.server.slash("run", {"code": SLOW_CHART}, channel_id=FOREIGN_CHANNEL)
    await bot.server.wait_for(lambda: any("step" in m.content for m in _shown(bot, interaction)))
    bot.server.expire(interaction)
    await bot.server.wait_for(
        lambda: not bot.client.door.lines.busy and not bot.client.conversations.turns
    )
    # The chart came after Discord's time for the interaction: it is not shown, and not
    # posted in the channel either.
    assert not any(m.attachments for m in _shown(bot, interaction))
    _never_posted_in_channels(bot)


async def test_the_stand_in_allows_five_follow_ups_where_only_a_user_install_authorized(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    interaction = await bot.server.slash("run", {"code": CHART}, channel_id=FOREIGN_CHANNEL)
    await _finished(bot, interaction)
    url = f"{bot.server.api_url}/webhooks/{APP_ID}/{interaction.token}?wait=true"
    codes = []
    async with aiohttp.ClientSession() as session:
        for _ in range(MAX_USER_INSTALL_FOLLOWUPS + 1):
            async with session.post(url, json={"content": "more"}) as response:
                codes.append(response.status if response.ok else (await response.json())["code"])
    follow_ups = len(_shown(bot, interaction)) - 1
    assert follow_ups == MAX_USER_INSTALL_FOLLOWUPS
    assert codes[-1] == 40094


async def test_run_alone_opens_the_editor_in_a_dm_between_people(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    opened = await bot.server.slash("run", channel_id=PEOPLE_DM)
    modal = await bot.server.wait_for(
        lambda: next(
            (
                c
                for c in bot.server.callbacks
                if c["interaction_id"] == opened.id and c["type"] == 9
            ),
            None,
        )
    )
    assert isinstance(modal, dict)
    submitted = await bot.server.submit_modal(
        modal["data"], {text_input_id(modal["data"]): QUICK}, channel_id=PEOPLE_DM
    )
    assert submitted.raw["authorizing_integration_owners"] == {"1": str(ALICE)}
    assert "42" in (await _finished(bot, submitted))[0].content
    _never_posted_in_channels(bot)


async def test_the_code_asks_for_input_through_the_interaction(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(user_install=True)
    interaction = await bot.server.slash("run", {"code": ASK_NAME}, channel_id=FOREIGN_CHANNEL)
    prompt = await bot.server.wait_for(
        lambda: next((m for m in _shown(bot, interaction) if has_button(m, "Answer")), None)
    )
    assert isinstance(prompt, Message)
    assert "Name:" in prompt.content
    opened = await bot.server.click(prompt, button_id(prompt, "Answer"), user=ALICE)
    modal = await bot.server.wait_for(
        lambda: next(
            (
                c
                for c in bot.server.callbacks
                if c["interaction_id"] == opened.id and c["type"] == 9
            ),
            None,
        )
    )
    assert isinstance(modal, dict)
    await bot.server.submit_modal(
        modal["data"], {text_input_id(modal["data"]): "Ada"}, channel_id=FOREIGN_CHANNEL
    )
    messages = await _finished(bot, interaction)
    assert "Ada" in messages[0].content
    _never_posted_in_channels(bot)
