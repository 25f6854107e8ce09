"""Background runs on Slack, as people see them: a direct run in a thread that outlasts its
1 s limit goes on in the background (the turn says so with ⏳, the run's output and status
follow in a message of its own in the thread, then a message there that mentions its starter
says it ended); the running turn offers Keep running (`cm_keep`) beside Stop (`cm_stop`),
which sends a hanging run to the background at once, and Stop on the background run's message
ends it; `/run --background CODE` goes there at once and its end is posted, in the thread
of the /run's own answer (as a Re-run there does); and a bystander's Stop on someone's
background run is refused (to them alone) while the run goes on. Once a turn's code waits for
the run in the background, its message says so and offers Run beside (`cm_beside`), which
runs that code now beside it (a bystander's press is refused), as `/run --beside CODE` does
at once (in a DM, in the person's latest conversation there). The real slack_bolt app
against the Slack stand-in, on the fake sandbox (no Docker), without a model (code runs
directly)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bench.standins.slack_server import ALICE, BOB, C_GENERAL, Message
from bot.agent import Agent
from bot.conversations import Conversations
from bot.errors import NOT_YOURS
from bot.fences import BOTH_FLAGS
from bot.platforms.progress import WAITING_BEHIND
from bot.sandbox_words import BESIDE_NOTE
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import HANG, QUICK, SLOW, slow_backend
from tests.support.on_slack import Bot, button, ephemeral_to, running_bot

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
def mode() -> str:
    """Socket Mode unless a test asks for both connection modes."""
    return "socket"


@pytest.fixture
async def conversations(
    fake_executor: Executor, make_agent: Callable[..., Agent], tmp_path: Path
) -> Conversations:
    agent = make_agent(fake_executor, None, tmp_path, timeout=5)
    return Conversations(agent, background_max_s=20, background_per_person=2)


@pytest.fixture
async def bot(mode: str, conversations: Conversations) -> AsyncIterator[Bot]:
    async with running_bot(mode, conversations) as running:
        try:
            yield running
        finally:
            # Nothing left running once the app is gone: every background run is stopped and
            # its end reported while the app can still post it.
            for stop_key in list(conversations.background.runs):
                conversations.background.stop(stop_key)
            await conversations.background.close(grace_s=10)
            assert not conversations.background.runs


# ── helpers ──────────────────────────────────────────────────────────────────────────────────


async def _conversation(bot: Bot, code: str, user: str = ALICE) -> str:
    """`user` mentions the bot in #general with a fenced block: the thread's root."""
    asked, _ = await bot.server.post(
        C_GENERAL, f"```python\n{code}\n```", user=user, mention_bot=True
    )
    return asked.ts


def _bot_messages(bot: Bot, root: str | None) -> list[Message]:
    """The bot's messages in a thread of #general (None: all of them in the channel)."""
    if root is None:
        return bot.server.channel_messages(C_GENERAL, by_bot=True)
    return bot.thread(C_GENERAL, root)


async def _shown(
    bot: Bot, root: str | None, test: Callable[[Message], bool], within: float = WAIT_S
) -> Message:
    """The first bot message in the thread (as it is now) that passes `test`, once there is
    one."""
    found = await bot.server.wait_for(
        lambda: next((m for m in _bot_messages(bot, root) if test(m)), None), within
    )
    assert isinstance(found, Message)
    return found


def _value(message: Message, action_id: str) -> str:
    """The value (the turn's or run's key) of a button on a message."""
    for block in message.blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == action_id:
                return str(element.get("value"))
    raise AssertionError(f"no {action_id} on {message.text[:80]!r}")


def _told(bot: Bot) -> list[str]:
    """What the bot answered people alone, by response_url."""
    return [str(r.get("text")) for r in bot.server.responses]


async def _all_ended(bot: Bot, conversations: Conversations) -> None:
    """Wait until no background run is left (each one's end reported, or not, as it can)."""
    await bot.server.wait_for(lambda: not conversations.background.runs)


# ── tests ────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_run_past_its_limit_goes_on_in_the_background_and_its_starter_is_mentioned(
    bot: Bot, fake_backend: FakeBackend
) -> None:
    root = await _conversation(bot, SLOW)
    ended = await _shown(bot, root, lambda m: m.text.startswith(ENDED))
    messages = _bot_messages(bot, root)
    turn = messages[0]
    # The turn ends saying where its run went; it did not wait for the run, nor stop it.
    (notice,) = [m for m in messages if NOTICE in m.text]
    assert f"{NOTICE} (up to 20 s in all)" in notice.text
    assert "time limit" not in "".join(m.text for m in messages)
    assert button(turn, "cm_rerun")
    assert not button(turn, "cm_stop")
    assert "step 4" not in turn.text  # the turn's message shows the run up to its limit
    # The run's own message in the thread, posted when it went, shows the rest of its output
    # and its end.
    (run,) = [m for m in messages if "step 4" in m.text]
    assert messages.index(turn) < messages.index(run) < messages.index(ended)
    assert SLOW in run.text
    assert "✅ ok in " in run.text
    assert not button(run, "cm_stop")
    # Then its starter is mentioned, in the thread (a mention notifies them on Slack).
    assert ended.thread_ts == root
    assert re.fullmatch(rf"{re.escape(ENDED)}it finished in \d+ s\. {ABOVE}", ended.text)
    assert all(f"<@{ALICE}>" not in m.text for m in messages if m is not ended)
    assert all(m.thread_ts == root for m in messages)  # all of it in the thread
    assert [code.strip() for code in fake_backend.runs] == [SLOW]  # it ran once


async def test_the_background_runs_message_ends_as_a_direct_runs_report(bot: Bot) -> None:
    root = await _conversation(bot, SLOW)
    ended = await _shown(bot, root, lambda m: m.text.startswith(ENDED))
    messages = _bot_messages(bot, root)
    (run,) = [m for m in messages if "step 4" in m.text]
    assert "✅ ok in " in run.text.splitlines()[-1], run.text  # its end, last
    assert "Thinking" not in run.text
    assert not any("without an answer" in m.text for m in messages)
    # After the run's message, only the turn's notice and the one that says it ended.
    after = messages[messages.index(run) + 1 :]
    assert [m.ts for m in after if NOTICE not in m.text] == [ended.ts]


async def test_the_turns_message_does_not_stay_running_once_its_run_went(bot: Bot) -> None:
    root = await _conversation(bot, SLOW)
    await _shown(bot, root, lambda m: m.text.startswith(ENDED))
    turn = _bot_messages(bot, root)[0]
    assert button(turn, "cm_rerun")  # the turn is over: this message changes no more
    assert "running for" not in turn.text, turn.text


@pytest.mark.parametrize("sandbox_limits", [30], indirect=True)
async def test_keep_running_sends_the_run_at_once_and_stop_ends_it_there(
    bot: Bot, conversations: Conversations
) -> None:
    root = await _conversation(bot, HANG)
    # The running turn offers Keep running beside Stop, for the same turn.
    progress = await _shown(bot, root, lambda m: "waiting" in m.text and button(m, "cm_keep"))
    key = _value(progress, "cm_stop")
    assert _value(progress, "cm_keep") == key

    await bot.server.click(progress, "cm_keep", user=ALICE)
    # Long before its 30 s limit the turn ends, saying so; the run goes on.
    await _shown(bot, root, lambda m: NOTICE in m.text, within=10)
    assert not button(progress, "cm_stop")
    assert not button(progress, "cm_keep")
    run = await _shown(bot, root, lambda m: m is not progress and button(m, "cm_stop"))
    assert HANG in run.text
    (stop_key,) = conversations.background.runs
    assert _value(run, "cm_stop") == stop_key
    assert not any(m.text.startswith(ENDED) for m in _bot_messages(bot, root))

    await bot.server.click(run, "cm_stop", user=ALICE)
    ended = await _shown(bot, root, lambda m: m.text.startswith(ENDED))
    assert ended.text.startswith(f"{ENDED}killed after ")
    assert STOPPED in ended.text
    assert STOPPED in run.text
    assert not button(run, "cm_stop")
    assert _told(bot) == []  # both presses did what they asked: nothing to tell anyone
    await _all_ended(bot, conversations)


async def test_run_background_goes_there_at_once_and_its_end_is_posted(
    bot: Bot, conversations: Conversations
) -> None:
    await bot.server.slash("/run", f"--background {SLOW}", user=ALICE)
    ended = await _shown(bot, None, lambda m: m.text.startswith(ENDED))
    assert ended.text.startswith(f"{ENDED}it finished in ")
    messages = _bot_messages(bot, None)
    # The turn's answer starts a thread of its own in the channel, and says where the run
    # went before any of its output: all of that is in the run's own message.
    turn = messages[0]
    (run,) = [m for m in messages if "step 4" in m.text]
    answer = [m for m in messages if turn.ts in (m.ts, m.thread_ts) and m is not run]
    assert any(NOTICE in m.text for m in answer)
    assert not any("step" in m.text for m in answer)
    assert "step 0" in run.text
    assert "✅ ok in " in run.text
    assert messages.index(run) < messages.index(ended)
    await _all_ended(bot, conversations)


async def test_a_bystanders_stop_on_a_background_run_is_refused_and_it_goes_on(
    bot: Bot, conversations: Conversations
) -> None:
    root = await _conversation(bot, HANG)
    await _shown(bot, root, lambda m: NOTICE in m.text)
    (stop_key,) = conversations.background.runs
    run = await _shown(bot, root, lambda m: button(m, "cm_stop"))
    assert _value(run, "cm_stop") == stop_key

    # Bob took no part in Alice's thread and is no admin.
    await bot.server.click(run, "cm_stop", user=BOB)
    await bot.server.wait_for(lambda: NOT_YOURS in _told(bot))
    (refusal,) = bot.server.responses
    assert refusal.get("response_type") == "ephemeral"  # only he sees it
    assert stop_key in conversations.background.runs
    assert not conversations.background.runs[stop_key].run.stop.is_set()
    assert button(run, "cm_stop")
    assert not any(m.text.startswith(ENDED) for m in _bot_messages(bot, root))

    # It was still running: Alice's Stop is what ends it.
    await bot.server.click(run, "cm_stop", user=ALICE)
    ended = await _shown(bot, root, lambda m: m.text.startswith(ENDED))
    assert ended.text.startswith(f"{ENDED}killed after ")
    assert STOPPED in ended.text
    await _all_ended(bot, conversations)


async def test_a_one_off_runs_background_messages_go_in_the_thread_of_its_reply(
    bot: Bot, conversations: Conversations
) -> None:
    """`/run --background` in a channel: the turn's answer is a message at the channel's top,
    and the background run's message and the mention when it ends go in that message's
    thread, as the rest of the answer does; Re-run there keeps it all in that thread."""
    await bot.server.slash("/run", f"--background {SLOW}", user=ALICE)
    ended = await _shown(bot, None, lambda m: m.text.startswith(ENDED))
    turn, *rest = _bot_messages(bot, None)
    assert turn.thread_ts is None  # the answer starts a thread of its own
    (run,) = [m for m in rest if "step 4" in m.text]
    assert any(NOTICE in m.text for m in rest)
    assert all(m.thread_ts == turn.ts for m in rest), [(m.thread_ts, m.text[:40]) for m in rest]
    assert run.thread_ts == ended.thread_ts == turn.ts
    await _all_ended(bot, conversations)

    # Re-run in that thread: the run reaches its 1 s limit and goes on in the same thread.
    await bot.server.wait_for(lambda: button(turn, "cm_rerun"))
    await bot.server.click(turn, "cm_rerun", user=ALICE)
    await bot.server.wait_for(
        lambda: len([m for m in _bot_messages(bot, None) if m.text.startswith(ENDED)]) == 2
    )
    again = _bot_messages(bot, None)
    assert [m for m in again if m.thread_ts is None] == [turn]  # nothing else at the top
    assert len([m for m in again if "step 4" in m.text]) == 2
    await _all_ended(bot, conversations)
    await bot.server.wait_for(lambda: not bot.slack.one_offs)  # nothing kept once it is over


# ── Run beside ───────────────────────────────────────────────────────────────────────────────


async def _kept(bot: Bot, channel: str, root: str) -> None:
    """HANG's turn in the thread, sent to the background by Keep running (its code did not
    wait: no Run beside)."""
    progress = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.thread(channel, root) if "waiting" in m.text and button(m, "cm_keep")),
            None,
        ),
        WAIT_S,
    )
    assert isinstance(progress, Message)
    assert not button(progress, "cm_beside")
    await bot.server.click(progress, "cm_keep", user=ALICE)
    await bot.server.wait_for(lambda: any(NOTICE in m.text for m in bot.thread(channel, root)))


@pytest.mark.parametrize("sandbox_limits", [30], indirect=True)
async def test_run_beside_is_offered_once_code_waits_and_runs_it_now_beside(
    bot: Bot, conversations: Conversations
) -> None:
    root = await _conversation(bot, HANG)
    await _kept(bot, C_GENERAL, root)
    (background_key,) = conversations.background.runs

    # A follow-up's code waits for the run in the background: its message says so and
    # offers Run beside (`cm_beside`), beside Stop and Keep running, for the same turn.
    await bot.server.post(C_GENERAL, f"```python\n{QUICK}\n```", user=ALICE, thread_ts=root)
    waiting = await _shown(bot, root, lambda m: button(m, "cm_beside"))
    assert WAITING_BEHIND in waiting.text
    assert "42" not in waiting.text
    key = _value(waiting, "cm_stop")
    assert _value(waiting, "cm_beside") == _value(waiting, "cm_keep") == key

    # Bob took no part in Alice's thread: his press is refused, to him alone, and the code
    # still waits.
    await bot.server.click(waiting, "cm_beside", user=BOB)
    await bot.server.wait_for(lambda: NOT_YOURS in _told(bot))
    (refusal,) = bot.server.responses
    assert refusal.get("response_type") == "ephemeral"
    running = conversations.turns.get(key)
    assert running is not None
    assert not running.turn.beside.is_set()
    assert button(waiting, "cm_beside")

    # Alice's press runs it now, in a second kernel, while the run in the background goes on.
    await bot.server.click(waiting, "cm_beside", user=ALICE)
    await bot.server.wait_for(lambda: button(waiting, "cm_rerun"))
    assert "42" in waiting.text
    assert BESIDE_NOTE in waiting.text
    assert WAITING_BEHIND not in waiting.text
    assert not button(waiting, "cm_beside")
    assert not button(waiting, "cm_stop")
    assert _told(bot) == [NOT_YOURS]  # Alice's press did what it asked: nothing to tell her
    assert background_key in conversations.background.runs
    assert not any(m.text.startswith(ENDED) for m in _bot_messages(bot, root))


@pytest.mark.parametrize("sandbox_limits", [30], indirect=True)
async def test_run_beside_flag_runs_at_once_beside_the_background_run(
    bot: Bot, conversations: Conversations, fake_backend: FakeBackend
) -> None:
    """`/run --beside CODE` in a DM runs in the person's latest conversation there, beside
    its run in the background; the flag is not code."""
    dm = bot.server.dm_channel(ALICE)
    asked, _ = await bot.server.post(dm, f"```python\n{HANG}\n```", user=ALICE)
    await _kept(bot, dm, asked.ts)
    await bot.server.slash("/run", f"--beside {QUICK}", channel=dm, user=ALICE)
    answer = await bot.server.wait_for(
        lambda: next((m for m in bot.thread(dm, asked.ts) if BESIDE_NOTE in m.text), None)
    )
    assert isinstance(answer, Message)
    assert "42" in answer.text
    assert WAITING_BEHIND not in answer.text  # it never waited
    assert not button(answer, "cm_beside")
    assert [code.strip() for code in fake_backend.runs] == [HANG, QUICK]
    assert len(conversations.background.runs) == 1

    # Both flags at once is not a thing: the person is told, alone, and nothing runs.
    await bot.server.slash("/run", f"--background --beside {QUICK}", channel=dm, user=ALICE)
    told = await bot.server.wait_for(lambda: ephemeral_to(bot, ALICE))
    assert told == [BOTH_FLAGS]
    assert len(fake_backend.runs) == 2
