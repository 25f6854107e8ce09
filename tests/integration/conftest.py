from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import docker
import pytest

from executor import Executor, PoolSettings, SandboxLimits, default_tag
from executor.docker_backend import connect
from tests.support.sandboxes import TEST_INSTANCE

RUNTIMES = ["runc", "runsc"]
NO_POOL = PoolSettings(size=0, template=False)
"""Each run starts exactly the sandbox it needs (no warm pool, no warmed template)."""


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test of a sandbox runs on runc and on gVisor, except those marked `any_runtime`
    (and those that choose one runtime themselves): what they show is the executor's and the
    runner's logic, which does not depend on the runtime, so they run on runc, the engine's
    default. Isolation, limits, faults, freezing, signals, networking and attaching again,
    where the runtimes differ, stay on both."""
    if "runtime" not in metafunc.fixturenames:
        return
    chosen = metafunc.definition.iter_markers("parametrize")
    if any(mark.args and mark.args[0] == "runtime" for mark in chosen):
        return
    one = metafunc.definition.get_closest_marker("any_runtime") is not None
    metafunc.parametrize("runtime", ["runc"] if one else RUNTIMES)


@pytest.fixture
def runtime(request: pytest.FixtureRequest) -> str:
    """The container runtime the test's sandboxes use (see pytest_generate_tests)."""
    return str(request.param)


@pytest.fixture
async def executor(
    runtime: str, docker_client: docker.DockerClient, request: pytest.FixtureRequest
) -> AsyncIterator[Executor]:
    # The data stack's warm-up costs each sandbox about half a CPU-second under runc and
    # more under gVisor, and what most of these tests show does not depend on it: their
    # sandboxes import nothing ahead. Tests marked `warm_up` get the default (see test_sessions).
    preload = "auto" if request.node.get_closest_marker("warm_up") else "none"
    limits = SandboxLimits(runtime=runtime, timeout_s=20, preload=preload)  # type: ignore[arg-type]
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
            default_tag(),
            limits=limits,
            instance=TEST_INSTANCE,
            pool=PoolSettings(**{"template": False, **pool}),
        )

    return make
