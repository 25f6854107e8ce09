"""Fixtures for the /restore tests of each front end: a fake kernel that keeps `x`, and a
sealed workspace store with automatic restore off."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from bot.workspaces import StoredWorkspaces
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun
from executor.workspace import WorkspaceSettings, WorkspaceStore
from storage.local import LocalStorage

SAVED = "A workspace from a moment ago is saved (x, data.csv): /restore brings it back."
RESTORED = "Restored your workspace from a moment ago: x, data.csv."


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            "x = 41": FakeRun(assigns={"x": "41"}, files={"data.csv": b"a,b\n1,2\n"}),
            "print(x)": FakeRun(shows="x"),
        }
    )


@pytest.fixture
def workspaces(tmp_path: Path) -> WorkspaceStore:
    secret = b"r" * 32
    return StoredWorkspaces(LocalStorage(tmp_path / "ws", secret), secret, timedelta(days=1))


@pytest.fixture
def workspace_settings() -> WorkspaceSettings:
    return WorkspaceSettings(auto_restore=False)


async def end_sessions(executor: Executor) -> None:
    """As the idle timeout does: every session ends and its workspace is saved."""
    executor.sessions.idle_timeout_s = 0.001
    await asyncio.sleep(0.01)
    await executor.sessions.reap()
    await asyncio.gather(*executor.sessions._saving.values())
    executor.sessions.idle_timeout_s = 900
