"""A real 90-second run in the background survives a restart of the bot on Docker (with
CELLMATE_SESSION_SECRET), under runc and runsc: see `a_long_run_survives_a_restart`."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations.background_store import BackgroundStore
from executor import Executor, SandboxLimits, default_tag
from executor.docker_backend import DockerBackend
from storage.local import LocalStorage
from tests.integration.conftest import NO_POOL, TEST_INSTANCE
from tests.support.links import SECRET
from tests.support.restarts import Restarts, a_long_run_survives_a_restart

pytestmark = pytest.mark.docker

SECONDS = 90


def agent_maker(tmp_path: Path) -> Callable[..., Agent]:
    """Agents without a model (the console's fenced code runs as it is)."""

    def make(executor: Executor, *_: Any, **__: Any) -> Agent:
        return Agent(
            executor,
            LocalStorage(tmp_path / "files", SECRET),
            History(tmp_path / "history.sqlite3"),
            client=None,
            model="none",
            limits=AgentLimits(),
        )

    return make


@pytest.fixture
async def restarts(runtime: str, tmp_path: Path) -> AsyncIterator[Restarts]:
    secret = secrets.token_hex(32)
    limits = SandboxLimits(runtime=runtime, timeout_s=2)  # type: ignore[arg-type]

    def executor(session_secret: str = secret) -> Executor:
        backend = DockerBackend(
            default_tag(), instance=TEST_INSTANCE, session_secret=session_secret
        )
        return Executor(default_tag(), limits=limits, backend=backend, pool=NO_POOL)

    store = BackgroundStore(tmp_path / "background.sqlite3")
    made = Restarts(executor, store, agent_maker(tmp_path), tmp_path, background_max_s=600)
    try:
        yield made
    finally:
        await made.close()
        store.close()
        async with executor(""):
            pass  # without the secret, what the last process left running is removed


async def test_a_90_second_background_run_survives_a_restart(restarts: Restarts) -> None:
    await a_long_run_survives_a_restart(restarts, SECONDS)
