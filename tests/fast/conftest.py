"""The fast layer: the real code above the executor, on the fake sandbox backend (no Docker).
The model server and agent factory are the same as the platform tests use."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from bot.logs import PAYLOAD_LOGGERS, quiet_payloads
from executor import Executor, PoolSettings, SandboxLimits
from executor.fake_backend import FakeBackend
from executor.workspace import WorkspaceSettings, WorkspaceStore
from tests.support.agents import clients, make_agent, model

__all__ = ["clients", "make_agent", "model"]


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    """The fake executor's limits; a module whose runs must outlast a few clicks raises the
    time limit by overriding this fixture."""
    return SandboxLimits(timeout_s=2, interrupt_grace_s=0.2)


@pytest.fixture
def workspaces() -> WorkspaceStore | None:
    """Where the fake executor keeps workspaces: nowhere, unless a module says."""
    return None


@pytest.fixture
def workspace_settings() -> WorkspaceSettings:
    return WorkspaceSettings()


@pytest.fixture
async def fake_executor(
    fake_backend: FakeBackend,
    sandbox_limits: SandboxLimits,
    workspaces: WorkspaceStore | None,
    workspace_settings: WorkspaceSettings,
) -> AsyncIterator[Executor]:
    async with Executor(
        "fake",
        limits=sandbox_limits,
        backend=fake_backend,
        pool=PoolSettings(size=0),
        workspaces=workspaces,
        workspace_settings=workspace_settings,
    ) as executor:
        yield executor
    assert not fake_backend.live, "a fake sandbox was left behind"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log line at DEBUG, as the bot logs with CELLMATE_LOG_LEVEL=DEBUG."""
    kept = {name: logging.getLogger(name).level for name in PAYLOAD_LOGGERS}
    caplog.set_level(logging.DEBUG)
    quiet_payloads()
    yield caplog
    for name, level in kept.items():
        logging.getLogger(name).setLevel(level)
