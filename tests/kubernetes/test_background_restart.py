"""A real 90-second run in the background survives a restart of the bot on Kubernetes (the
session secret lets the next process attach to the Pod): see
`a_long_run_survives_a_restart`."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations.background_store import BackgroundStore
from executor import Executor
from storage.local import LocalStorage
from tests.kubernetes.conftest import make_executor, sandbox_pods, wait_until
from tests.support.links import SECRET
from tests.support.restarts import Restarts, a_long_run_survives_a_restart

pytestmark = pytest.mark.kubernetes

SECONDS = 90


@pytest.fixture
async def restarts(
    bot_kubeconfig: str, admin: k8s.ApiClient, runtime: str, tmp_path: Path
) -> AsyncIterator[Restarts]:
    secret = secrets.token_hex(32)

    def executor(session_secret: str = secret) -> Executor:
        return make_executor(bot_kubeconfig, runtime, session_secret=session_secret, timeout_s=2)

    def agent(executor: Executor, *_: Any, **__: Any) -> Agent:
        return Agent(
            executor,
            LocalStorage(tmp_path / "files", SECRET),
            History(tmp_path / "history.sqlite3"),
            client=None,
            model="none",
            limits=AgentLimits(),
        )

    make: Callable[..., Agent] = agent
    store = BackgroundStore(tmp_path / "background.sqlite3")
    made = Restarts(executor, store, make, tmp_path, background_max_s=600)
    try:
        yield made
    finally:
        await made.close()
        store.close()
        async with executor(""):
            pass  # without the secret, the Pods the last process left are removed
        await wait_until(lambda: sandbox_pods(admin) == [])


async def test_a_90_second_background_run_survives_a_restart(restarts: Restarts) -> None:
    await a_long_run_survives_a_restart(restarts, SECONDS)
