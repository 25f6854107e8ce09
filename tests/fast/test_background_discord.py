"""Background runs on Discord, as people see them: a direct run in a thread that outlasts its
1 s limit goes on in the background (the turn says so with ⏳, the run's output and status
follow in a message of its own, then a message that notifies its starter, and only them, that
it ended); the running turn offers Keep running beside Stop, which sends a hanging run to the
background at once, and Stop on the background run's message ends it; `/run` with its
`background` option goes there at once, in a thread and in a plain channel; and a bystander's
Stop on someone's background run is refused while the run goes on. Once a turn's code waits
for the run in the background, its message says so and offers Run beside, which runs that
code now beside it (a bystander's press is refused), as `/run` with its `beside` option does
at once. The real discord.py client against the Discord stand-in, on the fake sandbox (no
Docker), without a model (code runs directly)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bench.standins.discord_server import ALICE, BOB, CHANNEL_GENERAL, EPHEMERAL, Message
from bot.agent import Agent
from bot.conversations import Conversations
from bot.errors import NOT_YOURS
from bot.fences import BOTH_FLAGS
from bot.platforms.progress import WAITING_BEHIND
from bot.sandbox_words import BESIDE_NOTE
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import HANG, QUICK, SLOW, slow_backend
from tests.support.on_discord import Bot, button_id, has_button, interaction_reply, running_bot

NOTICE = "⏳ This run goes on in the background"
ENDED = f"<@{ALICE}> your background run ended: "
STOPPED = "The run was stopped on request."
ABOVE = re.escape("Its output is in the message above.")
WAIT_S = 20.0


@pytest.fixture
def sandbox_limits(request: pytest.FixtureRequest) -> SandboxLimits:
    """A 1 s foreground limit, so that a slow run reaches it; a test that presses Keep
    running before the limit raises it (indirect parametrization)."""
    return SandboxLimits(timeout_s=getattr(request, "param", 1), interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return slow_backend()


@pytest.fixture
async def conversations(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> Conversations:
    agent = make_agent(fake_executor, None, tmp_path, timeout=5)
    return Conversations(agent, background_max_s=20, background_per_person=2)


@pytest.fixture
async def bot(conversations: Conversations) -> AsyncIterator[Bot]:
    async with running_bot(conversations.agent, conversations) as running:
        try:
            yield running
        finally:
            # Nothing left running once the client is gone: every background run is stopped
            # and its end reported while the client can still post it.
            for stop_key in list(conversations.background.runs):
                conversations.background.stop(stop_key)
            await conversations.background.close(grace_s=10)
            assert not conversations.background.runs


# ── helpers ──────────────────────────────────────────────────────────────────────────────────


async def _thread_with(bot: Bot, code: str, author: int = ALICE) -> int:
    """`author` mentions the bot in #general with a fenced block: the thread it runs in."""
    await bot.server.post_message(
        CHANNEL_GENERAL, f"```python\n{code}\n```", mention_bot=True, author=author
    )
    thread_id = await bot.server.wait_for(lambda: next(iter(bot.server.threads), None))
    assert isinstance(thread_id, int)
    return thread_id


async def _shown(
    bot: Bot, channel: int, test: Callable[[Message], bool], within: float = WAIT_S
) -> Message:
    """The first bot message in `channel` that passes `test` (as it is now), once there is
    one."""
    found = await bot.server.wait_for(
        lambda: next((m for m in bot.bot_messages(channel) if test(m)), None), within
    )
    assert isinstance(found, Message)
    return found


async def _acknowledged(bot: Bot, interaction: int) -> None:
    """Wait until the bot acknowledged a button press without a message (a deferred
    update: the press did what it asked)."""
    found = await bot.server.wait_for(
        lambda: [c["type"] for c in bot.server.callbacks if c["interaction_id"] == interaction]
    )
    assert found == [6], found


async def _all_ended(bot: Bot, conversations: Conversations) -> None:
    """Wait until no background run is left (each one's end reported, or not, as it can)."""
    await bot.server.wait_for(lambda: not conversations.background.runs)


# ── tests ────────────────────────────────────────────────────────────────────────────────────


async def test_a_run_past_its_limit_goes_on_in_the_background_and_its_starter_is_notified(
    bot: Bot, fake_backend: FakeBackend
) -> None:
    thread_id = await _thread_with(bot, SLOW)
    ended = await _shown(bot, thread_id, lambda m: m.content.startswith(ENDED))
    messages = bot.bot_messages(thread_id)
    turn = messages[0]
    # The turn ends saying where its run went; it did not wait for the run, nor stop it.
    (notice,) = [m for m in messages if NOTICE in m.content]
    assert notice.content.startswith(f"ℹ️ {NOTICE} (up to 20 s in all)")
    assert "time limit" not in "".join(m.content for m in messages)
    assert has_button(turn, "Re-run")
    assert not has_button(turn, "Stop")
    assert "step 4" not in turn.content  # the turn's message shows the run up to its limit
    # The run's own message, posted when it went, shows the rest of its output and its end.
    (run,) = [m for m in messages if "step 4" in m.content]
    assert turn.id < run.id < ended.id
    assert f"```py\n{SLOW}\n```" in run.content
    assert "✅ ok in " in run.content
    assert not has_button(run, "Stop")
    # Then its starter is told, in the thread, in a message that notifies them and nobody
    # else (no roles, no @everyone).
    assert re.fullmatch(rf"{re.escape(ENDED)}it finished in \d+ s\. {ABOVE}", ended.content)
    assert ended.mentions == [ALICE]
    assert ended.allowed_mentions is not None
    assert ended.allowed_mentions.get("parse") == []
    assert [str(user) for user in ended.allowed_mentions.get("users") or []] == [str(ALICE)]
    assert not ended.allowed_mentions.get("roles")
    assert all(m.mentions == [] for m in messages if m.id != ended.id)
    assert bot.bot_messages(CHANNEL_GENERAL) == []  # all of it in the thread
    assert [code.strip() for code in fake_backend.runs] == [SLOW]  # it ran once


async def test_the_background_runs_message_ends_as_a_direct_runs_report(bot: Bot) -> None:
    thread_id = await _thread_with(bot, SLOW)
    ended = await _shown(bot, thread_id, lambda m: m.content.startswith(ENDED))
    messages = bot.bot_messages(thread_id)
    (run,) = [m for m in messages if "step 4" in m.content]
    assert run.content.splitlines()[-1].startswith("✅ ok in "), run.content  # its end, last
    assert "Thinking" not in run.content
    assert not any("without an answer" in m.content for m in messages)
    # After the run's message, only the turn's notice and the one that says it ended.
    assert [m.id for m in messages if m.id > run.id and NOTICE not in m.content] == [ended.id]


async def test_the_turns_message_does_not_stay_running_once_its_run_went(bot: Bot) -> None:
    thread_id = await _thread_with(bot, SLOW)
    await _shown(bot, thread_id, lambda m: m.content.startswith(ENDED))
    turn = bot.bot_messages(thread_id)[0]
    assert has_button(turn, "Re-run")  # the turn is over: this message changes no more
    assert "running for" not in turn.content, turn.content


@pytest.mark.parametrize("sandbox_limits", [30], indirect=True)
async def test_keep_running_sends_the_run_at_once_and_stop_ends_it_there(
    bot: Bot, conversations: Conversations
) -> None:
    thread_id = await _thread_with(bot, HANG)
    # The running turn offers Keep running beside Stop, for the same turn.
    progress = await _shown(
        bot, thread_id, lambda m: "waiting" in m.content and has_button(m, "Keep running")
    )
    stop_id = button_id(progress, "Stop")
    assert stop_id.startswith("cm:stop:")
    key = stop_id.removeprefix("cm:stop:")
    assert button_id(progress, "Keep running") == f"cm:keep:{key}"

    pressed = await bot.server.click(progress, f"cm:keep:{key}", user=ALICE)
    await _acknowledged(bot, pressed.id)
    # Long before its 30 s limit the turn ends, saying so; the run goes on.
    await _shown(bot, thread_id, lambda m: NOTICE in m.content, within=10)
    turn = bot.server.messages[progress.id]
    assert not has_button(turn, "Stop")
    assert not has_button(turn, "Keep running")
    run = await _shown(bot, thread_id, lambda m: m.id != progress.id and has_button(m, "Stop"))
    assert f"```py\n{HANG}\n```" in run.content
    (stop_key,) = conversations.background.runs
    assert button_id(run, "Stop") == f"cm:stop:{stop_key}"
    assert not any(m.content.startswith(ENDED) for m in bot.bot_messages(thread_id))

    stopping = await bot.server.click(run, f"cm:stop:{stop_key}", user=ALICE)
    await _acknowledged(bot, stopping.id)
    ended = await _shown(bot, thread_id, lambda m: m.content.startswith(ENDED))
    assert ended.content.startswith(f"{ENDED}killed after ")
    assert STOPPED in ended.content
    shown = bot.server.messages[run.id]
    assert STOPPED in shown.content
    assert not has_button(shown, "Stop")
    await _all_ended(bot, conversations)


async def test_run_with_the_background_option_goes_there_at_once_and_its_end_is_posted(
    bot: Bot,
) -> None:
    thread_id = await _thread_with(bot, QUICK)
    await bot.answer_in(thread_id)
    done = await bot.server.slash(
        "run", {"code": SLOW, "background": True}, channel_id=thread_id, user=ALICE
    )
    ended = await _shown(bot, thread_id, lambda m: m.content.startswith(ENDED))
    assert ended.content.startswith(f"{ENDED}it finished in ")
    assert ended.mentions == [ALICE]
    answer = bot.server.interaction_messages(done)
    assert any(NOTICE in m.content for m in answer)
    # It went before any of its output: all of that is in the run's own message.
    assert not any("step" in m.content for m in answer)
    (run,) = [m for m in bot.bot_messages(thread_id) if "step 4" in m.content]
    assert "step 0" in run.content or "step 1" in run.content
    assert "✅ ok in " in run.content
    assert run.id < ended.id


async def test_run_with_the_background_option_in_a_channel_posts_its_end_there(
    bot: Bot, conversations: Conversations
) -> None:
    done = await bot.server.slash(
        "run", {"code": SLOW, "background": True}, channel_id=CHANNEL_GENERAL, user=ALICE
    )
    answer = await bot.server.wait_for(
        lambda: [m for m in bot.server.interaction_messages(done) if NOTICE in m.content]
    )
    assert answer
    await _all_ended(bot, conversations)
    # A one-off run: its own message and its end go to the channel it was asked in.
    shown = [m.content for m in bot.bot_messages(CHANNEL_GENERAL)]
    assert any("step 4" in text for text in shown), shown
    assert any(text.startswith(f"{ENDED}it finished in ") for text in shown), shown


async def test_a_bystanders_stop_on_a_background_run_is_refused_and_it_goes_on(
    bot: Bot, conversations: Conversations
) -> None:
    thread_id = await _thread_with(bot, HANG)
    await _shown(bot, thread_id, lambda m: NOTICE in m.content)
    (stop_key,) = conversations.background.runs
    run = await _shown(bot, thread_id, lambda m: has_button(m, "Stop"))
    assert button_id(run, "Stop") == f"cm:stop:{stop_key}"

    # Bob took no part in Alice's thread and moderates nothing.
    refused = await bot.server.click(run, f"cm:stop:{stop_key}", user=BOB)
    assert await interaction_reply(bot, refused) == NOT_YOURS
    (answer,) = [c for c in bot.server.callbacks if c["interaction_id"] == refused.id]
    assert answer["data"]["flags"] & EPHEMERAL  # only he sees it
    assert stop_key in conversations.background.runs
    assert not conversations.background.runs[stop_key].run.stop.is_set()
    assert has_button(bot.server.messages[run.id], "Stop")
    assert not any(m.content.startswith(ENDED) for m in bot.bot_messages(thread_id))

    # It was still running: Alice's Stop is what ends it.
    await bot.server.click(run, f"cm:stop:{stop_key}", user=ALICE)
    ended = await _shown(bot, thread_id, lambda m: m.content.startswith(ENDED))
    assert ended.content.startswith(f"{ENDED}killed after ")
    assert STOPPED in ended.content


# ── Run beside ───────────────────────────────────────────────────────────────────────────────


async def _kept(bot: Bot, thread_id: int) -> Message:
    """HANG's turn in the thread, sent to the background by Keep running: its message, as
    it was when its run was going (its code did not wait: no Run beside)."""
    progress = await _shown(
        bot, thread_id, lambda m: "waiting" in m.content and has_button(m, "Keep running")
    )
    assert not has_button(progress, "Run beside")
    await bot.server.click(progress, button_id(progress, "Keep running"), user=ALICE)
    await _shown(bot, thread_id, lambda m: NOTICE in m.content, within=10)
    return progress


@pytest.mark.parametrize("sandbox_limits", [30], indirect=True)
async def test_run_beside_is_offered_once_code_waits_and_runs_it_now_beside(
    bot: Bot, conversations: Conversations
) -> None:
    thread_id = await _thread_with(bot, HANG)
    await _kept(bot, thread_id)
    (background_key,) = conversations.background.runs

    # A follow-up's code waits for the run in the background: its message says so and
    # offers Run beside, beside Stop and Keep running, for the same turn.
    await bot.server.post_message(
        thread_id, f"```python\n{QUICK}\n```", author=ALICE, mention_bot=True
    )
    waiting = await _shown(bot, thread_id, lambda m: has_button(m, "Run beside"))
    assert WAITING_BEHIND in waiting.content
    assert "42" not in waiting.content
    key = button_id(waiting, "Stop").removeprefix("cm:stop:")
    assert button_id(waiting, "Run beside") == f"cm:beside:{key}"
    assert has_button(waiting, "Keep running")

    # Bob took no part in Alice's thread: his press is refused, to him alone, and the code
    # still waits.
    refused = await bot.server.click(waiting, f"cm:beside:{key}", user=BOB)
    assert await interaction_reply(bot, refused) == NOT_YOURS
    (answer,) = [c for c in bot.server.callbacks if c["interaction_id"] == refused.id]
    assert answer["data"]["flags"] & EPHEMERAL
    running = conversations.turns.get(key)
    assert running is not None
    assert not running.turn.beside.is_set()
    assert has_button(bot.server.messages[waiting.id], "Run beside")

    # Alice's press runs it now, in a second kernel, while the run in the background goes on.
    pressed = await bot.server.click(waiting, f"cm:beside:{key}", user=ALICE)
    await _acknowledged(bot, pressed.id)
    done = await _shown(bot, thread_id, lambda m: m.id == waiting.id and has_button(m, "Re-run"))
    assert "42" in done.content
    assert BESIDE_NOTE in done.content
    assert WAITING_BEHIND not in done.content
    assert not has_button(done, "Run beside")
    assert not has_button(done, "Stop")
    assert background_key in conversations.background.runs
    assert not any(m.content.startswith(ENDED) for m in bot.bot_messages(thread_id))


@pytest.mark.parametrize("sandbox_limits", [30], indirect=True)
async def test_run_with_the_beside_option_runs_at_once_beside_the_background_run(
    bot: Bot, conversations: Conversations, fake_backend: FakeBackend
) -> None:
    thread_id = await _thread_with(bot, HANG)
    await _kept(bot, thread_id)
    done = await bot.server.slash(
        "run", {"code": QUICK, "beside": True}, channel_id=thread_id, user=ALICE
    )
    answer = await bot.server.wait_for(
        lambda: [m for m in bot.server.interaction_messages(done) if BESIDE_NOTE in m.content]
    )
    assert "42" in answer[0].content
    assert WAITING_BEHIND not in answer[0].content  # it never waited
    assert not has_button(answer[0], "Run beside")
    assert [code.strip() for code in fake_backend.runs] == [HANG, QUICK]  # no flag in the code
    assert len(conversations.background.runs) == 1

    # Both options at once is not a thing: the person is told, alone, and nothing runs.
    both = await bot.server.slash(
        "run",
        {"code": QUICK, "background": True, "beside": True},
        channel_id=thread_id,
        user=ALICE,
    )
    assert await interaction_reply(bot, both) == BOTH_FLAGS
    (told,) = [c for c in bot.server.callbacks if c["interaction_id"] == both.id]
    assert told["data"]["flags"] & EPHEMERAL
    assert len(fake_backend.runs) == 2
