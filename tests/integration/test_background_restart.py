"""A real 90-second run in the background survives a restart of the bot on Docker (with
CELLMATE_SESSION_SECRET), under runc and runsc: see `a_long_run_survives_a_restart`."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.conversations.background_store import BackgroundStore
from bot.database import Databases
from executor import Executor, SandboxLimits, default_tag
from executor.docker_backend import DockerBackend
from tests.integration.conftest import NO_POOL, TEST_INSTANCE
from tests.support.restarts import Restarts, a_long_run_survives_a_restart, agents_without_a_model

pytestmark = pytest.mark.docker

SECONDS = 90


@pytest.fixture
async def restarts(runtime: str, tmp_path: Path) -> AsyncIterator[Restarts]:
    secret = secrets.token_hex(32)
    limits = SandboxLimits(runtime=runtime, timeout_s=2)  # type: ignore[arg-type]

    def executor(session_secret: str = secret) -> Executor:
        backend = DockerBackend(
            default_tag(), instance=TEST_INSTANCE, session_secret=session_secret
        )
        return Executor(default_tag(), limits=limits, backend=backend, pool=NO_POOL)

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
            pass  # without the secret, what the last process left running is removed


async def test_a_90_second_background_run_survives_a_restart(restarts: Restarts) -> None:
    await a_long_run_survives_a_restart(restarts, SECONDS)
