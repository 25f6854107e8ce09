"""Choosing a run's language in chat, with the real openai client and a scripted model server
on the fake sandbox: the model's `language` argument, a fenced block's tag, `/run --lang`,
what the model is told exists, and refusals of languages the sandbox does not run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.standins.openai_server import Reply, ScriptedModel, says
from bot.agent import Agent
from bot.events import Answer, CodeStarted
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, result, stdout
from tests.support.agent_turns import final, tool_messages, turn


def started(events: list[object]) -> list[tuple[str, str]]:
    return [(e.code, e.language) for e in events if isinstance(e, CodeStarted)]


async def test_the_model_runs_r_when_it_says_so(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    fake_backend.script = {"mean(c(1, 2, 6))": FakeRun(outputs=[stdout("[1] 3\n")])}
    model.script(Reply(code="mean(c(1, 2, 6))", language="r"), says("The mean is 3."))
    events = await turn(make_agent(fake_executor, model, tmp_path), "c-r", "in R: mean of 1,2,6")
    assert final(events) == Answer("The mean is 3.")
    assert started(events) == [("mean(c(1, 2, 6))", "r")]
    assert [(run.language, run.cells) for run in fake_backend.asked] == [
        ("r", ("mean(c(1, 2, 6))",))
    ]
    assert "[1] 3" in tool_messages(model.requests[1])[0]
    tool = model.requests[0]["tools"][0]["function"]
    assert tool["parameters"]["properties"]["language"]["enum"] == [
        "python",
        "r",
        "javascript",
        "typescript",
        "bash",
    ]
    system = model.requests[0]["messages"][0]["content"]
    assert 'set `language` to "r" (R' in system


@pytest.mark.parametrize("named", ["cobol", "", None])
async def test_a_language_the_model_makes_up_is_refused_or_python(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
    named: str | None,
) -> None:
    model.script(Reply(code="1 + 1", language=named), says("done"))
    await turn(make_agent(fake_executor, model, tmp_path), "c-x", "compute")
    if named == "cobol":
        assert fake_backend.asked == []
        told = tool_messages(model.requests[1])[0]
        assert "does not run 'cobol' code; it runs Python, R, JavaScript" in told
    else:
        assert [run.language for run in fake_backend.asked] == ["python"]


@pytest.mark.parametrize(
    ("text", "language", "code"),
    [
        ("```r\nx <- 41 + 1\n```", "r", "x <- 41 + 1\n"),
        ("```bash\necho $((41 + 1))\n```", "bash", "echo $((41 + 1))\n"),
        ("```js\nconsole.log(42)\n```", "javascript", "console.log(42)\n"),
        ("```python\nprint(42)\n```", "python", "print(42)\n"),
        ("```sql\nprint(42)\n```", "python", "print(42)\n"),
        ("```print(42)```", "python", "print(42)"),
        ("/run --lang r x <- 42", "r", "x <- 42"),
        ("/run --lang=ts const x: number = 42", "typescript", "const x: number = 42"),
        ("/run --background --lang bash echo 42", "bash", "echo 42"),
        ("/run ```R\nx <- 42\n```", "r", "x <- 42\n"),
        ("/run print(42)", "python", "print(42)"),
    ],
)
async def test_direct_code_runs_in_the_language_it_names(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    tmp_path: Path,
    text: str,
    language: str,
    code: str,
) -> None:
    events = await turn(make_agent(fake_executor, None, tmp_path), "c-direct", text)
    assert started(events) == [(code, language)]
    assert [(run.language, run.cells) for run in fake_backend.asked] == [(language, (code,))]


async def test_bash_code_is_run_as_written(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    tmp_path: Path,
) -> None:
    # Python's escapes for characters a chat may hide mean nothing in Bash's quotes.
    await turn(make_agent(fake_executor, None, tmp_path), "c-b", "```bash\necho 'a\u200bb'\n```")
    assert fake_backend.asked[0].cells == ("echo 'a\u200bb'\n",)


async def test_a_javascript_value_reaches_the_model_as_pythons_does(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    # The runner sends a JavaScript cell's last value as an execute_result, without the
    # execution count that tslab gives only in its reply.
    fake_backend.script = {
        "1 + 1": FakeRun(outputs=[result("2", count=None)]),
    }
    model.script(Reply(code="1 + 1", language="javascript"), says("JS: 2."))
    model.script(Reply(code="1 + 1"), says("Python: 2."))
    agent = make_agent(fake_executor, model, tmp_path)
    assert final(await turn(agent, "c-js", "1 + 1 in JavaScript")) == Answer("JS: 2.")
    assert final(await turn(agent, "c-py", "1 + 1 in Python")) == Answer("Python: 2.")
    js, python = tool_messages(model.requests[1])[0], tool_messages(model.requests[3])[0]
    assert "value:\n2" in js
    assert js == python


@pytest.mark.parametrize("text", ["/run --lang cobol DISPLAY 1", "/run --lang=sql select 1"])
async def test_run_naming_an_unknown_language_is_refused(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    tmp_path: Path,
    text: str,
) -> None:
    events = await turn(make_agent(fake_executor, None, tmp_path), "c-unknown", text)
    ending = final(events)
    assert isinstance(ending, Answer)
    assert "This sandbox does not run" in ending.text
    assert "it runs Python, R, JavaScript, TypeScript, Bash." in ending.text
    assert fake_backend.asked == []


async def test_a_python_only_sandbox_offers_and_runs_python_only(
    make_agent: Callable[..., Agent],
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    limits = SandboxLimits(timeout_s=2, languages=("none",))
    async with Executor(
        "fake", limits=limits, backend=fake_backend, pool=PoolSettings(size=0)
    ) as executor:
        agent = make_agent(executor, model, tmp_path)
        refused = await turn(agent, "c-py", "```r\nx <- 1\n```")
        ending = final(refused)
        assert isinstance(ending, Answer)
        assert ending.text == "This sandbox does not run 'r' code; it runs Python."
        assert fake_backend.asked == []

        model.script(says("hi"))
        await turn(agent, "c-py", "hello")
        tool = model.requests[0]["tools"][0]["function"]
        assert "language" not in tool["parameters"]["properties"]
        assert "`language`" not in model.requests[0]["messages"][0]["content"]
