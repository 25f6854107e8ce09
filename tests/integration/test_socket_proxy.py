"""The Docker socket proxy: the executor works through it, and nothing else gets through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import docker
import pytest

from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag
from executor.docker_backend import SANDBOX_LABEL
from executor.socket_proxy import SocketProxy
from tests.integration.conftest import TEST_INSTANCE
from tests.storage.azurite import free_port

pytestmark = pytest.mark.docker


@pytest.fixture
async def proxy_url() -> AsyncIterator[str]:
    proxy = SocketProxy("/var/run/docker.sock")
    port = free_port()
    server = await proxy.start("127.0.0.1", port)
    yield f"tcp://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()
    await proxy.close()


async def test_the_executor_runs_sessions_and_files_through_the_proxy(
    proxy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", proxy_url)
    async with Executor(
        default_tag(),
        limits=SandboxLimits(timeout_s=20),
        instance=TEST_INSTANCE,
        pool=PoolSettings(size=1),
    ) as executor:
        session = executor.session("through-the-proxy")
        await session.put_files({"in.csv": b"a,b\n1,2\n"})
        result = await session.run(
            "import pandas as pd\nt = pd.read_csv('in.csv')\nt.to_csv('out.csv')\nprint(t.b.sum())"
        )
        assert result.status is Status.OK, result.message
        assert result.stdout == "2\n"
        assert [f.path for f in result.files] == ["out.csv"]
        stopped = await session.run("import time\ntime.sleep(60)", timeout_s=1)
        assert stopped.status is Status.TIMEOUT
        one_off = await executor.run_notebook(["x = 6 * 7", "x"])
        assert one_off.results[-1].text == "42"


def _refused(call: object) -> str:
    with pytest.raises(docker.errors.APIError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.status_code == 403
    return str(caught.value.explanation)


async def test_everything_else_is_refused(proxy_url: str) -> None:
    # Blocking Docker calls go to a thread: the proxy serves them on this event loop.
    await asyncio.to_thread(check_refusals, proxy_url)


def check_refusals(proxy_url: str) -> None:
    client = docker.DockerClient(base_url=proxy_url)
    direct = docker.from_env()
    image = default_tag()
    hardened = {
        "user": "1000:1000",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": {SANDBOX_LABEL: "1"},
        "network_mode": "none",
    }
    outsider = direct.containers.create(image, command="true")  # not a sandbox
    try:
        assert client.ping()
        assert "privileged" in _refused(
            lambda: client.containers.create(image, **{**hardened, "privileged": True})
        )
        assert "Binds" in _refused(
            lambda: client.containers.create(
                image, volumes={"/": {"bind": "/host", "mode": "rw"}}, **hardened
            )
        )
        assert "sandbox image" in _refused(lambda: client.containers.create("busybox", **hardened))
        assert "non-root" in _refused(
            lambda: client.containers.create(image, **{**hardened, "user": "0"})
        )
        assert "namespace" in _refused(
            lambda: client.containers.create(image, **{**hardened, "pid_mode": "host"})
        )
        assert "tmpfs" in _refused(
            lambda: client.volumes.create(
                "cellmate-steal",
                driver_opts={"type": "none", "o": "bind", "device": "/etc"},
                labels={SANDBOX_LABEL: "1"},
            )
        )
        assert "filtered" in _refused(lambda: client.containers.list(all=True))
        assert "not a Cellmate sandbox" in _refused(
            lambda: client.api.remove_container(outsider.id)
        )
        assert "not something the executor does" in _refused(
            lambda: client.api.exec_create(outsider.id, "id")
        )
        assert "not something the executor does" in _refused(lambda: client.images.pull("alpine"))
        assert "not something the executor does" in _refused(lambda: client.networks.list())
    finally:
        outsider.remove(force=True)
        client.close()
        direct.close()
