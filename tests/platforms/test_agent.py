"""The agent with the real openai client, a scripted model server, the real sandbox."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent
from bot.events import (
    Answer,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    OutputChunk,
)
from executor import Executor, Status
from storage.intake import IncomingFile
from tests.support.agent_turns import final, tool_messages, turn

pytestmark = pytest.mark.docker


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


async def test_without_a_model_code_still_runs(
    make_agent: Callable[..., Agent], executor: Executor, tmp_path: Path
) -> None:
    agent = make_agent(executor, None, tmp_path)
    events = await turn(agent, "c-none", "```python\nprint(sum(range(5)))\n```")
    # The run report is the whole answer: no separate "Done.".
    assert final(events) == Answer("")
    assert [e.code for e in events if isinstance(e, CodeStarted)] == ["print(sum(range(5)))\n"]
    again = await turn(agent, "c-none", "/run 1/0")
    assert final(again) == Answer("")
    (ended,) = [e for e in again if isinstance(e, ExecutionFinished)]
    assert ended.status is Status.ERROR
    errors = [e.output.error for e in again if isinstance(e, OutputChunk) and e.output.error]
    assert [error.name for error in errors] == ["ZeroDivisionError"]
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
