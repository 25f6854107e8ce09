"""The model and agent fixtures the platform tests and the no-Docker tests share: the
scripted OpenAI-compatible server on loopback, and agents built on a given executor.
A conftest imports them by name to offer them to its tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from bench.standins.openai_server import ScriptedModel
from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.database import Databases
from executor import Executor
from storage.local import LocalStorage
from tests.support.links import SECRET


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    """An OpenAI-compatible server on loopback that answers from the test's script."""
    server = await ScriptedModel().start()
    yield server
    await server.stop()


@pytest.fixture
async def clients() -> AsyncIterator[list[openai.AsyncOpenAI]]:
    made: list[openai.AsyncOpenAI] = []
    yield made
    for client in made:
        await client.close()


@pytest.fixture
def make_agent(clients: list[openai.AsyncOpenAI]) -> Callable[..., Agent]:
    def make(
        executor: Executor,
        model: ScriptedModel | None,
        tmp_path: Path,
        timeout: float = 30,
        **limits: Any,
    ) -> Agent:
        client = None
        if model is not None:
            client = openai.AsyncOpenAI(
                api_key="test-key", base_url=model.base_url, max_retries=2, timeout=timeout
            )
            clients.append(client)
        return Agent(
            executor,
            LocalStorage(tmp_path / "files", SECRET),
            History(Databases.sqlite(tmp_path / f"history-{len(clients)}")),
            client=client,
            model="scripted-model",
            limits=AgentLimits(**limits),
        )

    return make
