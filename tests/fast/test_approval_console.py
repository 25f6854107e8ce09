"""Code approval in the console (`cellmate chat` fed by a pipe): /policy, and y, n or e
(with the replacement code) typed after the model's code is shown."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.approval import OFF_NOTICE, OFF_REFUSAL
from bot.conversations.policy import Policies, PolicySettings
from bot.database import Databases
from bot.platforms.console import APPROVAL_PROMPT, Console
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.fast.test_console_turns import Chat

ASKED = "print(6 * 7)"
EDITED = "print('once', 1)"


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            ASKED: FakeRun(outputs=[stdout("42\n")]),
            EDITED: FakeRun(outputs=[stdout("once 1\n")]),
        }
    )


@pytest.fixture
def chat(
    fake_executor: Executor, make_agent: Callable[..., Agent], model: ScriptedModel, tmp_path: Path
) -> Iterator[Callable[..., Chat]]:
    opened: list[Policies] = []

    def make(**policy: Any) -> Chat:
        agent = make_agent(fake_executor, model, tmp_path, timeout=5)
        policies = Policies(Databases.sqlite(tmp_path), PolicySettings(**policy))
        opened.append(policies)
        made = Chat(agent, tmp_path)
        made.console = Console(
            Conversations(agent, policies=policies), made.out, tmp_path / "exports"
        )
        return made

    yield make
    for policies in opened:
        with contextlib.suppress(Exception):
            policies.close()


def _tool_results(model: ScriptedModel) -> list[str]:
    return [str(m["content"]) for m in model.requests[-1]["messages"] if m["role"] == "tool"]


async def test_y_runs_the_code_after_showing_it(
    chat: Callable[..., Chat], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    model.script(runs(ASKED), says("It is 42."))
    out = await chat(default="approve").pipe("what is 6 times 7?", "y")
    asked_at = out.index(APPROVAL_PROMPT)
    assert ASKED in out[:asked_at]  # shown before anything runs
    assert "✅ Approved by you; it runs." in out
    assert "42\n" in out[asked_at:]
    assert out.splitlines()[-1] == "It is 42."
    assert [code.strip() for code in fake_backend.runs] == [ASKED]


async def test_e_runs_the_typed_code_instead_and_the_model_is_told(
    chat: Callable[..., Chat], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    model.script(runs(ASKED), says("It printed once 1."))
    out = await chat(default="approve").pipe("what is 6 times 7?", f"maybe\ne\n{EDITED}\n.")
    assert "Answer y (run it), n (do not run it) or e (edit it first)." in out
    assert "✏️ Edited by you; the edited code runs." in out
    assert "once 1\n" in out
    assert [code.strip() for code in fake_backend.runs] == [EDITED]
    (told,) = _tool_results(model)
    assert "edited your code" in told
    assert EDITED in told


async def test_n_and_the_end_of_input_decline_and_the_model_answers_once(
    chat: Callable[..., Chat], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    model.script(runs(ASKED), says("Not run, as you wished."))
    console = chat(default="approve")
    out = await console.pipe("what is 6 times 7?", "n")
    assert "🚫 Cancelled by you; it was not run." in out
    assert out.count("Not run, as you wished.") == 1
    assert "declined to run it" in _tool_results(model)[0]

    model.script(runs(ASKED), says("Nobody said yes."))
    out = await console.pipe("and now?")  # the input ends before an answer
    assert "🚫 Cancelled by you; it was not run." in out
    assert out.count("Nobody said yes.") == 1
    assert fake_backend.runs == []


async def test_policy_command_sets_off_which_persists_and_refuses_code(
    chat: Callable[..., Chat], model: ScriptedModel, fake_backend: FakeBackend
) -> None:
    out = await chat().pipe("/policy", "/policy never", "/policy off")
    assert "The code policy here is auto (from the default)" in out
    assert "Use /policy auto, /policy approve or /policy off" in out
    assert "The code policy of the console is now off" in out

    again = chat()  # a new process over the same data directory
    model.script(runs(ASKED), says("I cannot run code here."))
    out = await again.pipe("/policy", "what is 6 times 7?", f"```python\n{ASKED}\n```")
    assert "The code policy here is off (from the console)" in out
    assert f"note: {OFF_NOTICE}" in out
    assert "I cannot run code here." in out
    assert f"✗ {OFF_REFUSAL}" in out
    assert APPROVAL_PROMPT not in out
    assert fake_backend.runs == []
