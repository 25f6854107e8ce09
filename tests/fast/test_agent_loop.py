"""The agent's loop with the real openai client and a scripted model server, on the fake
sandbox: how it talks to the model, retries, limits and failures, in seconds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import openai

from bench.standins.openai_server import Reply, ScriptedModel, fails, runs, says
from bot.agent import Agent
from bot.events import Answer, CodeStarted, ExecutionFinished, Failure
from executor import Executor, Status
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.agent_turns import final, tool_messages, turn


async def test_b_an_error_goes_back_to_the_model_which_fixes_it(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    fake_backend.script = {
        "print(totl)": FakeRun(error=("NameError", "name 'totl' is not defined")),
        "total = 6 * 7\nprint(total)": FakeRun(outputs=[stdout("42\n")]),
    }
    model.script(runs("print(totl)"), runs("total = 6 * 7\nprint(total)"), says("The total is 42."))
    events = await turn(make_agent(fake_executor, model, tmp_path), "c-b", "what is 6 times 7?")
    assert final(events) == Answer("The total is 42.")
    statuses = [e.status for e in events if isinstance(e, ExecutionFinished)]
    assert statuses == [Status.ERROR, Status.OK]
    error_feedback = tool_messages(model.requests[1])[0]
    assert "status: error" in error_feedback
    assert "NameError: name 'totl' is not defined" in error_feedback
    assert "stdout:\n42" in tool_messages(model.requests[2])[1]


async def test_d_the_step_limit_ends_the_turn(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.endless = runs("1 + 1")
    events = await turn(
        make_agent(fake_executor, model, tmp_path, max_steps=3), "c-d", "loop forever"
    )
    ending = final(events)
    assert isinstance(ending, Failure)
    assert ending.message.startswith("I stopped after 3 steps without a final answer.")
    assert len(model.requests) == 3


async def test_e_a_429_is_retried_after_the_delay_it_asks_for(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(fails(429, retry_after="1"), says("Hello!"))
    events = await turn(make_agent(fake_executor, model, tmp_path), "c-e", "hi")
    assert final(events) == Answer("Hello!")
    assert len(model.requests) == 2


async def test_f_code_from_a_cut_off_reply_never_runs(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    model.script(Reply(code="open('/mnt/data/should-not-exist', 'w')", finish_reason="length"))
    events = await turn(make_agent(fake_executor, model, tmp_path), "c-f", "write a long program")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert "cut off by its length limit, so its code was not run" in ending.message
    assert not any(isinstance(e, CodeStarted) for e in events)
    assert fake_backend.runs == []


async def test_a_model_that_stays_down_gets_one_clear_message(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.endless = fails(500)
    events = await turn(make_agent(fake_executor, model, tmp_path), "c-down", "hi")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert ending.message == "The model is not available right now (HTTP 500). Try again later."
    assert len(model.requests) == 3  # one try and two bounded retries


async def test_a_slow_model_times_out_with_a_clear_message(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.endless = Reply(content="too late", delay_s=3)
    events = await turn(make_agent(fake_executor, model, tmp_path, timeout=0.5), "c-slow", "hi")
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
