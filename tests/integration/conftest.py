from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator

import docker
import pytest

from executor import Executor, PoolSettings, SandboxLimits, default_tag
from executor.docker_backend import connect
from executor.docker_specs import INSTANCE_LABEL, SANDBOX_LABEL

# Its own instance label per test process, so that concurrent runs never see (or sweep)
# each other's sandboxes.
TEST_INSTANCE = os.environ.get("CELLMATE_TEST_INSTANCE", "tests")
RUNTIMES = ["runc", "runsc"]
NO_POOL = PoolSettings(size=0)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = connect()  # raises EngineUnavailable with instructions: a failure, not a skip
    try:
        client.images.get(default_tag())
    except docker.errors.ImageNotFound:
        pytest.fail(
            f"sandbox image {default_tag()} is missing: run `make test` or `cellmate build-image`"
        )
    yield client
    client.close()


def live_sandboxes(client: docker.DockerClient, instance: str = TEST_INSTANCE) -> list[str]:
    selector = [f"{SANDBOX_LABEL}=1", f"{INSTANCE_LABEL}={instance}"]
    names = [c.name for c in client.containers.list(all=True, filters={"label": selector})]
    names += [v.name for v in client.volumes.list(filters={"label": selector})]
    return [str(n) for n in names]


@pytest.fixture(autouse=True)
def no_sandbox_left_behind(docker_client: docker.DockerClient) -> Iterator[None]:
    yield
    assert live_sandboxes(docker_client) == [], "a sandbox (container or volume) was left behind"


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def executor(runtime: str, docker_client: docker.DockerClient) -> AsyncIterator[Executor]:
    limits = SandboxLimits(runtime=runtime, timeout_s=20)  # type: ignore[arg-type]
    # No pool: each run starts exactly the sandbox it needs, which keeps the suite lean.
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        yield ex


Pooled = Callable[..., Executor]
"""Makes an executor on the test's runtime with a warm pool: `pooled(size=2, max_live=4)`."""


@pytest.fixture
def pooled(runtime: str) -> Pooled:
    def make(**pool: int) -> Executor:
        limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
        return Executor(
            default_tag(), limits=limits, instance=TEST_INSTANCE, pool=PoolSettings(**pool)
        )

    return make
