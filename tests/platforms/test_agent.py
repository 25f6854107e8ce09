"""The agent with the real openai client, a scripted model server, the real sandbox."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from bot.agent import Agent, UserMessage
from bot.events import (
    Answer,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    Failure,
    TurnEvent,
)
from executor import Executor, Status
from storage.intake import IncomingFile
from tests.platforms.openai_server import Reply, ScriptedModel, fails, runs, says

pytestmark = pytest.mark.docker


async def turn(
    agent: Agent, conversation: str, text: str, attachments: list[IncomingFile] | None = None
) -> list[TurnEvent]:
    events: list[TurnEvent] = []
    await agent.turn(conversation, UserMessage(text, attachments or []), events.append)
    return events


def final(events: list[TurnEvent]) -> Answer | Failure:
    endings = [e for e in events if isinstance(e, Answer | Failure)]
    assert len(endings) == 1, endings  # exactly one answer per message
    assert endings[0] is events[-1]
    return endings[0]


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_loads_an_attached_csv_and_plots_it(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(
        runs(
            "import pandas as pd, matplotlib.pyplot as plt\n"
            "df = pd.read_csv('sales.csv')\n"
            "df.plot(x='month', y='revenue')\n"
            "plt.show()"
        ),
        says("Here is revenue by month."),
    )
    agent = make_agent(executor, model, tmp_path)
    events = await turn(
        agent,
        "c-a",
        "plot revenue by month",
        [IncomingFile("sales.csv", None, b"month,revenue\n1,10\n2,30\n3,20\n")],
    )
    assert final(events) == Answer("Here is revenue by month.")
    published = next(e for e in events if isinstance(e, ArtifactsPublished)).artifacts
    assert [(a.name, a.status, a.inline_image) for a in published] == [
        ("chart-1.png", "published", True)
    ]
    assert published[0].link is not None
    chart = await asyncio.to_thread(Path(published[0].link.removeprefix("file://")).read_bytes)
    assert chart.startswith(b"\x89PNG")
    first_request = model.requests[0]
    assert first_request["messages"][0]["role"] == "system"
    user = first_request["messages"][-1]["content"]
    assert "sales.csv: 3 rows, 2 columns: month (int64), revenue (int64)" in user
    assert "chart chart-1.png" in tool_messages(model.requests[1])[0]
    assert "http" not in tool_messages(model.requests[1])[0]  # the model never gets links to repeat


async def test_b_an_error_goes_back_to_the_model_which_fixes_it(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(runs("print(totl)"), runs("total = 6 * 7\nprint(total)"), says("The total is 42."))
    events = await turn(make_agent(executor, model, tmp_path), "c-b", "what is 6 times 7?")
    assert final(events) == Answer("The total is 42.")
    statuses = [e.status for e in events if isinstance(e, ExecutionFinished)]
    assert statuses == [Status.ERROR, Status.OK]
    error_feedback = tool_messages(model.requests[1])[0]
    assert "status: error" in error_feedback
    assert "NameError: name 'totl' is not defined" in error_feedback
    assert "stdout:\n42" in tool_messages(model.requests[2])[1]


async def test_c_a_follow_up_reuses_a_variable_and_the_history(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    agent = make_agent(executor, model, tmp_path)
    model.script(runs("x = 41"), says("Stored."))
    await turn(agent, "c-c", "remember 41 as x")
    model.script(runs("x + 1"), says("It is 42."))
    events = await turn(agent, "c-c", "and x plus one?")
    assert final(events) == Answer("It is 42.")
    follow_up = model.requests[2]["messages"]
    assert [m["role"] for m in follow_up] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert "value:\n42" in tool_messages(model.requests[3])[-1]


async def test_d_the_step_limit_ends_the_turn(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.endless = runs("1 + 1")
    events = await turn(make_agent(executor, model, tmp_path, max_steps=3), "c-d", "loop forever")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert ending.message.startswith("I stopped after 3 steps without a final answer.")
    assert len(model.requests) == 3


async def test_e_a_429_is_retried_after_the_delay_it_asks_for(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(fails(429, retry_after="1"), says("Hello!"))
    events = await turn(make_agent(executor, model, tmp_path), "c-e", "hi")
    assert final(events) == Answer("Hello!")
    assert len(model.requests) == 2


async def test_f_code_from_a_cut_off_reply_never_runs(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(Reply(code="open('/mnt/data/should-not-exist', 'w')", finish_reason="length"))
    events = await turn(make_agent(executor, model, tmp_path), "c-f", "write a long program")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert "cut off by its length limit, so its code was not run" in ending.message
    assert not any(isinstance(e, CodeStarted) for e in events)


async def test_a_model_that_stays_down_gets_one_clear_message(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.endless = fails(500)
    events = await turn(make_agent(executor, model, tmp_path), "c-down", "hi")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert ending.message == "The model is not available right now (HTTP 500). Try again later."
    assert len(model.requests) == 3  # one try and two bounded retries


async def test_without_a_model_code_still_runs(
    make_agent: Callable[..., Agent], executor: Executor, tmp_path: Path
) -> None:
    agent = make_agent(executor, None, tmp_path)
    events = await turn(agent, "c-none", "```python\nprint(sum(range(5)))\n```")
    assert final(events) == Answer("Done.")
    assert [e.code for e in events if isinstance(e, CodeStarted)] == ["print(sum(range(5)))\n"]
    again = await turn(agent, "c-none", "/run 1/0")
    assert final(again) == Answer("ZeroDivisionError: division by zero")
    chat = await turn(agent, "c-none", "plot something nice")
    ending = final(chat)
    assert isinstance(ending, Answer)
    assert ending.text.startswith("No model is configured")


async def test_reset_forgets_history_and_variables(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    agent = make_agent(executor, model, tmp_path)
    model.script(runs("y = 1"), says("ok"))
    await turn(agent, "c-reset", "set y")
    await agent.reset("c-reset")
    model.script(runs("'y' in globals()"), says("gone"))
    await turn(agent, "c-reset", "is y there?")
    assert [m["role"] for m in model.requests[2]["messages"]] == ["system", "user"]
    assert "value:\nFalse" in tool_messages(model.requests[3])[0]


async def test_a_slow_model_times_out_with_a_clear_message(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.endless = Reply(content="too late", delay_s=3)
    events = await turn(make_agent(executor, model, tmp_path, timeout=0.5), "c-slow", "hi")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert ending.message == (
        "The model is not available right now (it did not answer in time). Try again later."
    )


async def test_streamed_completions_from_the_test_server_parse_with_the_real_client(
    model: ScriptedModel,
) -> None:
    model.script(runs("print(1)"))
    async with openai.AsyncOpenAI(api_key="k", base_url=model.base_url, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        chunks = [chunk async for chunk in stream]
    calls = [c for chunk in chunks for c in (chunk.choices[0].delta.tool_calls or [])]
    assert calls[0].function is not None
    assert calls[0].function.arguments == '{"code": "print(1)"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_charts_are_shown_to_vision_models_but_not_kept_in_history(
    make_agent: Callable[..., Agent], executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(
        runs("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [1, 2])\nplt.show()"),
        says("b is twice a."),
        says("Still true."),
    )
    agent = make_agent(executor, model, tmp_path, vision=True)
    await turn(agent, "c-vision", "compare a and b")
    shown = model.requests[1]["messages"][-1]
    assert shown["role"] == "user"
    assert shown["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    await turn(agent, "c-vision", "is that still true?")
    later = json.dumps(model.requests[2]["messages"])
    assert "image_url" not in later  # pictures never go into the stored history
