"""Slack's surface for AI apps, as a user sees it: answers streamed as the model writes them
(and the edited progress message where streaming cannot carry them), and the assistant view's
threads with their greeting, suggested prompts, title, status line and context. slack_bolt
against the Slack test server (Socket Mode), the scripted model, the fake sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bench.standins.openai_server import Reply, ScriptedModel, runs, says
from bench.standins.slack_server import (
    ALICE,
    BOB,
    BOT_TOKEN,
    C_GENERAL,
    C_OTHER,
    MARKDOWN_LIMIT,
    TEAM_ID,
    Message,
    SlackServer,
)
from bot.platforms.on_slack.mrkdwn import to_mrkdwn
from bot.settings import ASSISTANT_PROMPTS, SlackSettings
from executor.fake_backend import FakeBackend
from tests.fast.test_slack_turns import CHART, HANG, PNG, SALES, fake_backend, mode, sandbox_limits
from tests.fast.test_slack_turns import start_bot as start_bot
from tests.support.on_slack import Bot, button

__all__ = ["fake_backend", "mode", "sandbox_limits", "start_bot"]

WORDS = " ".join(f"word{n}" for n in range(60))
ANSWER = f"Here is what **I found**: {WORDS}."


def stream_calls(bot: Bot, method: str) -> list[dict[str, Any]]:
    return [args for _, called, args in bot.server.stream_calls if called == method]


def streamed(bot: Bot, message: Message) -> str | None:
    return bot.server.streams.get((message.channel, message.ts))


async def streaming_bot(start: Callable[..., Awaitable[Bot]], **settings: Any) -> Bot:
    bot = await start(**settings)
    bot.server.streaming = True
    return bot


# ── streamed answers ───────────────────────────────────────────────────────────────────


async def test_the_answer_streams_into_its_own_message_which_becomes_the_whole_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)
    model.script(Reply(content=ANSWER, pieces=40, piece_delay_s=0.02))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    # The progress message ("Working on it…" with Stop) is gone: the streamed message,
    # in the asker's thread, is the answer, in the model's own markdown.
    (answer,) = messages
    assert answer.text == ANSWER
    assert answer.thread_ts == asked.ts
    assert streamed(bot, answer) == "stopped"
    (start,) = stream_calls(bot, "chat.startStream")
    assert start["recipient_user_id"] == ALICE
    assert start["recipient_team_id"] == TEAM_ID
    assert start["markdown_text"]
    assert ANSWER.startswith(start["markdown_text"])
    assert start["markdown_text"] != ANSWER  # the first words went out before the rest
    appends = stream_calls(bot, "chat.appendStream")
    assert len(appends) < 40 // 2  # paced, not one call per fragment
    # The progress message never showed the words: they were streamed.
    others = [m for m in bot.server.messages.values() if m.ts != answer.ts]
    assert not any("word5" in text for m in others for text in [m.text, *m.edits])


async def test_code_output_stays_in_the_progress_message_and_the_answer_streams_after(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)
    model.script(runs(CHART), Reply(content="Sales **peaked** in month 2.", pieces=4))
    asked, _ = await bot.server.post(
        C_GENERAL, "plot the sales", mention_bot=True, files=[("sales.csv", SALES)]
    )
    messages = await bot.answered(C_GENERAL, asked.ts)
    texts = [m.text for m in messages if not m.files]
    progress, answer = texts
    assert "read_csv(" in progress
    assert "plotted" in progress
    assert not any(button(m, "cm_stop") for m in messages)
    assert answer == "Sales **peaked** in month 2."
    assert [f.content for f in bot.server.files if f.name.endswith(".png")] == [PNG]


async def test_words_before_code_stay_as_their_own_message_and_the_answer_follows(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)
    model.script(
        Reply(content="Let me work that out.", code="print(6 * 7)", pieces=3),
        Reply(content="It is **42**.", pieces=3),
    )
    asked, _ = await bot.server.post(C_GENERAL, "six times seven?", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    progress, before, answer = (m.text for m in messages)
    assert "print(6 * 7)" in progress
    assert "42" in progress
    assert before == "Let me work that out."
    assert answer == "It is **42**."
    assert all(streamed(bot, m) == "stopped" for m in messages[1:])


async def test_without_the_streaming_methods_the_progress_message_becomes_the_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot()  # the stand-in workspace answers unknown_method
    model.script(Reply(content=ANSWER, pieces=20, piece_delay_s=0.02), says("Again."))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert [m.text for m in messages] == [to_mrkdwn(ANSWER)]
    await bot.server.post(C_GENERAL, "and again?", thread_ts=asked.ts)
    messages = await bot.answered(C_GENERAL, asked.ts, count=2)
    assert messages[-1].text == "Again."
    # Slack said once that it cannot stream; the bot did not ask again.
    assert len(stream_calls(bot, "chat.startStream")) == 1


async def test_streaming_off_edits_the_progress_message(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot, stream=False)
    model.script(says(ANSWER))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert [m.text for m in messages] == [to_mrkdwn(ANSWER)]
    assert bot.server.stream_calls == []


async def test_a_rate_limited_start_falls_back_at_once(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)
    bot.server.rate_limits["chat.startStream"] = 0  # every call: 429 with Retry-After
    model.script(Reply(content=ANSWER, pieces=10))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)
    messages = await bot.answered(
        C_GENERAL,
        asked.ts,
    )
    assert [m.text for m in messages] == [to_mrkdwn(ANSWER)]
    assert len(stream_calls(bot, "chat.startStream")) == 1  # not retried, not waited for


async def test_a_stream_slack_ended_is_rewritten_with_the_whole_answer(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)

    def expire(method: str, args: dict[str, Any]) -> None:
        if method == "chat.appendStream":
            bot.server.expire_stream(bot.server.messages[(args["channel"], args["ts"])])

    bot.server.call_hooks.append(expire)
    model.script(Reply(content=ANSWER, pieces=40, piece_delay_s=0.02))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    assert [m.text for m in messages] == [to_mrkdwn(ANSWER)]
    assert stream_calls(bot, "chat.appendStream")  # it did stream, until Slack ended it


async def test_an_answer_past_the_markdown_limit_ends_complete_in_parts(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)
    lines = [f"line {n}: " + "x" * 90 for n in range(MARKDOWN_LIMIT // 90)]
    long = "\n".join(lines)
    assert len(long) > MARKDOWN_LIMIT
    model.script(Reply(content=long, pieces=30))
    asked, _ = await bot.server.post(C_GENERAL, "a long one", mention_bot=True)
    messages = await bot.answered(C_GENERAL, asked.ts)
    shown = "\n".join(m.text for m in messages)
    assert all(line in shown for line in lines)
    assert len(messages) > 1
    assert all(len(m.text) <= 3000 for m in messages)  # each part fits a section


async def test_stop_while_the_answer_streams_ends_it_with_what_was_written(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await streaming_bot(start_bot)
    model.script(Reply(content=ANSWER, pieces=60, piece_delay_s=0.1))
    asked, _ = await bot.server.post(C_GENERAL, "what did you find?", mention_bot=True)

    def streaming() -> Message | None:
        return next(
            (m for m in bot.thread(C_GENERAL, asked.ts) if streamed(bot, m) == "streaming"), None
        )

    await bot.server.wait_for(streaming)
    progress = next(m for m in bot.thread(C_GENERAL, asked.ts) if button(m, "cm_stop"))
    await bot.server.click(progress, "cm_stop")
    messages = await bot.answered(C_GENERAL, asked.ts)
    (answer,) = messages
    assert streamed(bot, answer) == "stopped"
    assert ANSWER.startswith(answer.text)
    assert answer.text != ANSWER
    assert "Stopped." in str(answer.blocks)
    assert not any(button(m, "cm_stop") for m in messages)


# ── the assistant view ─────────────────────────────────────────────────────────────────


async def test_a_new_assistant_thread_gets_the_greeting_and_suggested_prompts(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot()
    dm, root, delivery = await bot.server.open_assistant_thread(viewing=C_GENERAL)
    assert delivery.status == 200
    greeting = await bot.server.wait_for(lambda: bot.thread(dm, root))
    assert isinstance(greeting, list)
    assert greeting[0].text == SlackSettings().greeting()
    prompts = await bot.server.wait_for(lambda: bot.server.prompts.get((dm, root)))
    assert isinstance(prompts, dict)
    titles = [p["title"] for p in prompts["prompts"]]
    assert titles == [item.split("::")[0].strip() for item in ASSISTANT_PROMPTS.split("|")]


async def test_the_greeting_and_prompts_are_configurable_and_may_be_off(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(assistant_greeting="off", assistant_prompts="Say hi | Count :: 1+1")
    dm, root, _ = await bot.server.open_assistant_thread()
    found = await bot.server.wait_for(lambda: bot.server.prompts.get((dm, root)))
    assert isinstance(found, dict)
    assert found["prompts"] == [
        {"title": "Say hi", "message": "Say hi"},
        {"title": "Count", "message": "1+1"},
    ]
    assert bot.thread(dm, root) == []


async def test_someone_not_admitted_gets_no_greeting(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(dms=False)
    dm, root, delivery = await bot.server.open_assistant_thread(user=BOB)
    assert delivery.status == 200
    assert bot.thread(dm, root) == []
    assert (dm, root) not in bot.server.prompts


async def test_a_question_in_an_assistant_thread_titles_it_shows_status_and_streams(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    bot = await streaming_bot(start_bot, assistant_greeting="off", assistant_prompts="off")
    dm, root, _ = await bot.server.open_assistant_thread(viewing=C_GENERAL)
    model.script(runs("print(6 * 7)"), Reply(content="It is **42**.", pieces=3))
    await bot.server.post(dm, "What is six times seven?", thread_ts=root)
    messages = await bot.answered(dm, root)
    assert bot.server.titles[(dm, root)] == "What is six times seven?"
    shown = [status for channel, ts, status in bot.server.statuses if (channel, ts) == (dm, root)]
    assert "is thinking…" in shown
    assert "is running code…" in shown
    assert (dm, root) not in bot.server.status  # cleared at the end
    assert [m.text for m in messages if not m.files][-1] == "It is **42**."
    assert "42" in messages[0].text  # the run report, in the progress message
    # The channel the person looks at reached the model as context, not as their words.
    first = model.requests[0]["messages"]
    assert str(first[-1]["content"]) == "What is six times seven?"
    assert f"<#{C_GENERAL}>" in str(first[0]["content"])
    assert "not an instruction" in str(first[0]["content"])


async def test_context_goes_with_each_question_and_follows_the_channel_viewed(
    start_bot: Callable[..., Awaitable[Bot]], model: ScriptedModel
) -> None:
    bot = await start_bot(assistant_greeting="off", assistant_prompts="off")
    dm, root, _ = await bot.server.open_assistant_thread(viewing=C_GENERAL)
    model.script(says("One."), says("Two."), says("Three."))
    for count, question in enumerate(("first?", "second?"), 1):
        await bot.server.post(dm, question, thread_ts=root)
        await bot.answered(dm, root, count=count)
    await bot.server.view_channel(dm, root, C_OTHER)
    await bot.server.post(dm, "third?", thread_ts=root)
    await bot.answered(dm, root, count=3)
    asked = [str(request["messages"][-1]["content"]) for request in model.requests]
    assert asked == ["first?", "second?", "third?"]  # their words, and only theirs
    systems = [str(request["messages"][0]["content"]) for request in model.requests]
    assert [f"<#{C_GENERAL}>" in s for s in systems] == [True, True, False]
    assert f"<#{C_OTHER}>" in systems[2]
    history = str(model.requests[2]["messages"][1:])
    assert "not an instruction" not in history  # never kept in the history
    assert bot.server.titles[(dm, root)] == "first?"  # the first question only


async def test_an_edited_code_message_in_an_assistant_thread_runs_again(
    start_bot: Callable[..., Awaitable[Bot]], fake_backend: FakeBackend
) -> None:
    bot = await start_bot(use_model=False, assistant_greeting="off", assistant_prompts="off")
    dm, root, _ = await bot.server.open_assistant_thread()
    asked, _ = await bot.server.post(dm, "```print(1)```", thread_ts=root)
    await bot.answered(dm, root)
    await bot.server.edit(asked, "```print(6 * 7)```")
    await bot.answered(dm, root, count=2)
    assert [code.strip() for code in fake_backend.runs] == ["print(1)", "print(6 * 7)"]


async def test_stop_in_an_assistant_thread_stops_the_run(
    start_bot: Callable[..., Awaitable[Bot]],
) -> None:
    bot = await start_bot(use_model=False, assistant_greeting="off", assistant_prompts="off")
    dm, root, _ = await bot.server.open_assistant_thread()
    await bot.server.post(dm, f"```\n{HANG}\n```", thread_ts=root)
    running = await bot.server.wait_for(
        lambda: next(
            (m for m in bot.thread(dm, root) if button(m, "cm_stop") and "waiting" in m.text),
            None,
        )
    )
    assert isinstance(running, Message)
    await bot.server.click(running, "cm_stop")
    messages = await bot.answered(dm, root)
    assert "stopped on request" in messages[0].text
    assert (dm, root) not in bot.server.status


# ── the stand-in's streaming methods, as slack_sdk calls them ──────────────────────────


async def test_the_stand_in_refuses_what_slack_refuses() -> None:
    server = SlackServer(mode="socket")
    await server.start()
    client = AsyncWebClient(token=BOT_TOKEN, base_url=server.api_url)
    try:
        server.streaming = True
        root = await client.chat_postMessage(channel=C_GENERAL, text="a question")

        async def error(call: Awaitable[Any]) -> str:
            try:
                await call
            except SlackApiError as exc:
                return str(exc.response["error"])
            return "ok"

        start = client.chat_startStream(
            channel=C_GENERAL, thread_ts=str(root["ts"]), markdown_text="a"
        )
        assert await error(start) == "missing_recipient_user_id"
        started = await client.chat_startStream(
            channel=C_GENERAL,
            thread_ts=str(root["ts"]),
            markdown_text="a",
            recipient_user_id=ALICE,
            recipient_team_id=TEAM_ID,
        )
        ts = str(started["ts"])
        too_long = "x" * MARKDOWN_LIMIT
        assert (
            await error(client.chat_appendStream(channel=C_GENERAL, ts=ts, markdown_text=too_long))
            == "msg_too_long"
        )
        await client.chat_stopStream(channel=C_GENERAL, ts=ts, markdown_text="b")
        assert server.messages[(C_GENERAL, ts)].text == "ab"
        assert (
            await error(client.chat_appendStream(channel=C_GENERAL, ts=ts, markdown_text="c"))
            == "message_not_in_streaming_state"
        )
        server.rate_limits["chat.startStream"] = 1
        response = await error(
            client.chat_startStream(
                channel=C_GENERAL,
                thread_ts=str(root["ts"]),
                recipient_user_id=ALICE,
                recipient_team_id=TEAM_ID,
            )
        )
        assert response == "ratelimited"
        server.streaming = False
        assert await error(client.chat_stopStream(channel=C_GENERAL, ts=ts)) == "unknown_method"
    finally:
        await server.close()
