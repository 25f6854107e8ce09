"""The backends the runner contract runs on: the fake (fast layer), Docker under runc and
gVisor (`docker`), and a Kubernetes cluster (`kubernetes`, its fixtures as in
tests/kubernetes: skipped without CELLMATE_TEST_KUBECONFIG, a failure in CI). Each test gets
a started sandbox, ready and warm, and leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import pytest

from executor import SandboxLimits, default_tag
from executor.docker_backend import DockerBackend, connect
from executor.fake_backend import FakeBackend, FakeRun, stdout
from executor.kubernetes_backend import KubernetesBackend
from executor.protocol import Sandbox, SandboxBackend
from executor.runner_client import RunnerClient
from tests.kubernetes.conftest import admin, bot_kubeconfig, deployed, sandbox_pods, settings
from tests.support.sandboxes import TEST_INSTANCE

__all__ = ["admin", "bot_kubeconfig", "deployed"]  # the cluster's fixtures, used by name

ENV_NAME = "CONTRACT_COLOR"
ASKING = "from getpass import getpass\na = input('First? ')\nb = getpass('Second? ')\nprint(a, b)"
FAKE_SCRIPT: Mapping[str, FakeRun] = {
    "print(6 * 7)": FakeRun(outputs=[stdout("42\n")]),
    "raise ValueError('no')": FakeRun(error=("ValueError", "no")),
    "print('never')": FakeRun(outputs=[stdout("never\n")]),
    "print('started', flush=True)\nimport time\ntime.sleep(600)": FakeRun(
        outputs=[stdout("started\n")], hang=True
    ),
    "import os\nprint(os.environ.get('CONTRACT_COLOR'))": FakeRun(outputs=[stdout("teal\n")]),
    ASKING: FakeRun(asks=[("First? ", False), ("Second? ", True)]),
    "input('anyone? ')": FakeRun(asks=[("anyone? ", False)]),
    "x = 41": FakeRun(assigns={"x": "41"}),
    "print(x + 1)": FakeRun(outputs=[stdout("42\n")]),
    "print(x)": FakeRun(shows="x"),
    "y <- 41": FakeRun(assigns={"y": "41"}),
    'cat(y, "\\n", sep = "")': FakeRun(shows="y"),
}
"""What the fake answers for the contract's code: what the real kernel prints for it."""

BACKENDS = [
    pytest.param("fake", id="fake"),
    pytest.param("docker-runc", marks=pytest.mark.docker, id="docker-runc"),
    pytest.param("docker-runsc", marks=pytest.mark.docker, id="docker-runsc"),
    pytest.param("kubernetes-runc", marks=pytest.mark.kubernetes, id="kubernetes-runc"),
]


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def limits(backend_name: str) -> SandboxLimits:
    runtime = "runsc" if backend_name.endswith("runsc") else "runc"
    return SandboxLimits(runtime=runtime, timeout_s=30, env_allowed=(ENV_NAME,))  # type: ignore[arg-type]


@pytest.fixture
async def backend(
    backend_name: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxBackend]:
    if backend_name == "fake":
        yield FakeBackend(FAKE_SCRIPT)
        return
    if backend_name.startswith("docker"):
        connect().close()  # a missing engine is a failure, never a skip
        docker_backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
        try:
            yield docker_backend  # tests/conftest.py checks that it leaves no sandbox behind
        finally:
            await docker_backend.close()
        return
    kubeconfig = request.getfixturevalue("bot_kubeconfig")
    cluster = request.getfixturevalue("admin")
    pods = KubernetesBackend(default_tag(), settings(kubeconfig), instance=TEST_INSTANCE)
    try:
        yield pods
    finally:
        await pods.close()
        async with asyncio.timeout(60):
            while sandbox_pods(cluster, TEST_INSTANCE):  # noqa: ASYNC110 (Pods have no event)
                await asyncio.sleep(0.2)


async def started(backend: SandboxBackend, limits: SandboxLimits) -> Sandbox:
    """A sandbox from `backend`, its runner ready and warm."""
    sandbox = await backend.start(limits, None)
    try:
        async with asyncio.timeout(180):
            client = RunnerClient(sandbox)
            assert await client.ready() is not None, getattr(sandbox, "stderr_tail", "")
            assert await client.warm()
    except BaseException:
        await sandbox.destroy()
        raise
    return sandbox


@pytest.fixture
async def sandbox(backend: SandboxBackend, limits: SandboxLimits) -> AsyncIterator[Sandbox]:
    one = await started(backend, limits)
    try:
        yield one
    finally:
        await one.destroy()
