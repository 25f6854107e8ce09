"""The Docker engine restarting under a live session: a clear error, recovery, no leftovers."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import docker
import pytest

from executor import (
    EngineUnavailable,
    Executor,
    PoolSettings,
    SandboxError,
    SandboxLimits,
    Status,
    default_tag,
)
from executor.docker_specs import NAME_PATTERN
from tests.support.sandboxes import TEST_INSTANCE, live_sandboxes

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


def restart_engine() -> None:
    """Restart the local engine the way its operator would (systemd, or our own script)."""
    if Path("/run/systemd/system").is_dir() and shutil.which("systemctl"):
        subprocess.run(["systemctl", "restart", "docker"], check=True)
        return
    subprocess.run(["pkill", "-x", "dockerd"], check=True)
    deadline = time.monotonic() + 60
    while (
        subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, check=False).returncode == 0
    ):
        assert time.monotonic() < deadline, "dockerd did not stop within 60 s"
        time.sleep(0.2)
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure-docker.sh")], check=True)


def plain_sandbox_volumes(client: docker.DockerClient) -> set[str]:
    """Volumes named like a sandbox's but without its labels: what the engine makes when a
    container is created on a sandbox volume that is gone."""
    return {
        str(v.name)
        for v in client.volumes.list()
        if NAME_PATTERN.fullmatch(str(v.name)) and not v.attrs.get("Labels")
    }


async def test_engine_restart_mid_run(runtime: str, docker_client: docker.DockerClient) -> None:
    before = plain_sandbox_volumes(docker_client)
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    pool = PoolSettings(size=1, max_live=4, template=False)
    async with Executor(
        default_tag(), limits=limits, instance=TEST_INSTANCE, pool=pool
    ) as executor:
        session = executor.session("through-a-restart")
        await session.run("x = 1")
        running = asyncio.create_task(session.run("import time\ntime.sleep(120)"))
        await asyncio.sleep(1)
        await asyncio.to_thread(restart_engine)
        (result,) = await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 120)
        if isinstance(result, BaseException):
            assert isinstance(result, EngineUnavailable | SandboxError), result
            assert "engine" in str(result)
        else:
            assert result.status is Status.KILLED
            assert result.message.startswith("The sandbox stopped unexpectedly")
        after = await session.run("'x' in globals()")
        assert after.status is Status.OK
        assert after.session_restarted
        assert after.results[-1].text == "False"
        fresh = await executor.run_notebook("print('engine is back')")
        assert fresh.stdout == "engine is back\n"
    assert live_sandboxes(docker_client) == []
    # The pool kept starting sandboxes while the engine went away and came back: none of
    # those starts may leave a plain volume on the engine's disk.
    assert plain_sandbox_volumes(docker_client) <= before
