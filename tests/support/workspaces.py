"""An executor whose sessions save their workspaces into a local store, as the workspace
tests of every language use it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, default_tag
from executor.workspace import WorkspaceSettings
from storage.local import LocalStorage
from tests.support.sandboxes import TEST_INSTANCE


def local_store(folder: Path, secret: bytes) -> StoredWorkspaces:
    return StoredWorkspaces(LocalStorage(folder / "files", secret), secret, timedelta(days=1))


def saving_executor(runtime: str, store: StoredWorkspaces, **pool: float) -> Executor:
    return Executor(
        default_tag(),
        limits=SandboxLimits(runtime=runtime, timeout_s=60),  # type: ignore[arg-type]
        instance=TEST_INSTANCE,
        # Sessions end and save their workspace: none is paused to a memory snapshot.
        pool=PoolSettings(size=0, template=False, pause_after_s=0, **pool),  # type: ignore[arg-type]
        workspaces=store,
        workspace_settings=WorkspaceSettings(max_mb=20, max_variables_mb=2),
    )


async def end_idle_sessions(ex: Executor) -> None:
    """Wait past the idle timeout (0.5 s), end the idle sessions and their saves."""
    await asyncio.sleep(0.6)
    await ex.sessions.reap()
    await asyncio.gather(*ex.sessions._saving.values())
    assert ex.sessions.active == []
