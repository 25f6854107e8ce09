"""The Azure OpenAI path (`AZURE_OPENAI_ENDPOINT`): the client that the settings build, the
real `openai` AsyncAzureOpenAI, against the scripted server's Azure-style deployment URLs
and `api-key` header; a full turn (a tool call, then the answer), streamed and whole, a
wrong key, and the doctor's model check. On the fake sandbox: no Docker needed."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.database import Databases
from bot.events import Answer, CodeStarted, Failure
from bot.ops.doctor import _model as doctor_model_check
from bot.ops.model_setup import build_model_client
from bot.settings import ModelSettings, Settings
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, stdout
from storage.local import LocalStorage
from tests.support.agent_turns import final, tool_messages, turn
from tests.support.links import SECRET

DEPLOYMENT = "cellmate-gpt-4o"
CODE = "print(6 * 7)"


@pytest.fixture
async def fake_executor() -> AsyncIterator[Executor]:
    backend = FakeBackend({CODE: FakeRun(outputs=[stdout("42\n")])})
    async with Executor(
        "fake", limits=SandboxLimits(timeout_s=5), backend=backend, pool=PoolSettings(size=0)
    ) as executor:
        yield executor


def azure_settings(model: ScriptedModel, key: str = "azure-test-key") -> ModelSettings:
    return ModelSettings(
        azure_endpoint=model.azure_endpoint,
        azure_api_key=key,
        model=DEPLOYMENT,
        max_retries=0,
        timeout_s=10,
    )


async def agent_for(
    settings: ModelSettings, executor: Executor, tmp_path: Path, made: list[openai.AsyncOpenAI]
) -> Agent:
    client = build_model_client(settings)
    assert isinstance(client, openai.AsyncAzureOpenAI)
    made.append(client)
    return Agent(
        executor,
        LocalStorage(tmp_path / "files", SECRET),
        History(Databases.sqlite(tmp_path / f"history-{len(made)}")),
        client=client,
        model=settings.model,
        limits=AgentLimits(stream=settings.stream),
    )


@pytest.mark.parametrize("stream", [True, False])
async def test_a_turn_through_azure_runs_the_tool_call_and_answers(
    stream: bool, model: ScriptedModel, fake_executor: Executor, tmp_path: Path
) -> None:
    made: list[openai.AsyncOpenAI] = []
    settings = dataclasses.replace(azure_settings(model), stream=stream)
    agent = await agent_for(settings, fake_executor, tmp_path, made)
    model.script(runs(CODE), says("It is 42."))
    try:
        events = await turn(agent, "az", "what is 6 times 7?")
    finally:
        for client in made:
            await client.close()
    assert final(events) == Answer("It is 42.")
    assert [e.code for e in events if isinstance(e, CodeStarted)] == [CODE]
    assert "stdout:\n42" in tool_messages(model.requests[1])[0]
    expected = f"/openai/deployments/{DEPLOYMENT}/chat/completions?api-version=2024-10-21"
    assert model.paths == [expected, expected]
    assert [bool(r.get("stream")) for r in model.requests] == [stream, stream]


async def test_a_wrong_azure_key_gets_one_clear_message(
    model: ScriptedModel, fake_executor: Executor, tmp_path: Path
) -> None:
    made: list[openai.AsyncOpenAI] = []
    agent = await agent_for(azure_settings(model, key="wrong"), fake_executor, tmp_path, made)
    model.script(says("never sent"))
    try:
        events = await turn(agent, "az-key", "hi")
    finally:
        for client in made:
            await client.close()
    ending = final(events)
    assert isinstance(ending, Failure)
    assert ending.message == "The model is not available right now (HTTP 401). Try again later."
    assert model.requests == []  # refused before the model saw anything
    assert len(model.replies) == 1


async def test_the_doctor_checks_azure_and_shows_the_history_budget(
    model: ScriptedModel,
) -> None:
    good = Settings(model=dataclasses.replace(azure_settings(model), history_tokens=8000))
    found = await doctor_model_check(good)
    assert [(f.name, f.ok) for f in found] == [("model", True), ("history", True)]
    assert found[1].detail == (
        "8,000 tokens of earlier messages per request (CELLMATE_HISTORY_TOKENS), counted "
        f"approximately (tiktoken o200k_base; {DEPLOYMENT} is not an OpenAI model); "
        "older turns become a summary"
    )
    wrong = Settings(model=azure_settings(model, key="wrong"))
    (refused,) = await doctor_model_check(wrong)
    assert not refused.ok
    assert "AZURE_OPENAI_" in refused.fix
