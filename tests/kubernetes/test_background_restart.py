"""A real 90-second run in the background survives a restart of the bot on Kubernetes (the
session secret lets the next process attach to the Pod): see
`a_long_run_survives_a_restart`."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from bot.conversations.background_store import BackgroundStore
from bot.database import Databases
from executor import Executor
from tests.kubernetes.conftest import make_executor, sandbox_pods, wait_until
from tests.support.restarts import Restarts, a_long_run_survives_a_restart, agents_without_a_model

pytestmark = pytest.mark.kubernetes

SECONDS = 90


@pytest.fixture
async def restarts(
    bot_kubeconfig: str, admin: k8s.ApiClient, runtime: str, tmp_path: Path
) -> AsyncIterator[Restarts]:
    secret = secrets.token_hex(32)

    def executor(session_secret: str = secret) -> Executor:
        return make_executor(bot_kubeconfig, runtime, session_secret=session_secret, timeout_s=2)

    store = BackgroundStore(Databases.sqlite(tmp_path))
    made = Restarts(
        executor, store, agents_without_a_model(tmp_path), tmp_path, background_max_s=600
    )
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
