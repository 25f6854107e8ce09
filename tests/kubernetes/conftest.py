"""The Kubernetes backend against a real cluster: `CELLMATE_TEST_KUBECONFIG` names an admin
kubeconfig (`.ci/run` starts ../shared/k8s-kit and sets it, with the sandbox image loaded).
Without it these tests are reported as skipped, except in CI, where that is a failure.

The manifests in deploy/kubernetes/ are applied as shipped, and the executor runs with the
bot's own service account token, so the tests prove the RBAC they grant is enough."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from executor import Executor, PoolSettings, SandboxLimits, default_tag
from executor.kubernetes_backend import (
    INSTANCE_LABEL,
    SANDBOX_LABEL,
    KubernetesBackend,
    KubernetesSettings,
)

KUBECONFIG = os.environ.get("CELLMATE_TEST_KUBECONFIG", "")
MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
NAMESPACE = "cellmate-sandboxes"
BOT_NAMESPACE, BOT_ACCOUNT = "cellmate", "cellmate"
TEST_INSTANCE = os.environ.get("CELLMATE_TEST_INSTANCE", "tests")
NO_POOL = PoolSettings(size=0)
RUNTIME_CLASSES = {"runc": "runc", "runsc": "gvisor"}
"""The kit's RuntimeClass names."""


@pytest.fixture(scope="session")
def admin() -> Iterator[k8s.ApiClient]:
    if not KUBECONFIG:
        if os.environ.get("CI") == "true":
            pytest.fail("CELLMATE_TEST_KUBECONFIG is not set: .ci/run starts the cluster")
        pytest.skip("no cluster: set CELLMATE_TEST_KUBECONFIG to an admin kubeconfig")
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=KUBECONFIG, client_configuration=configuration)
    with k8s.ApiClient(configuration) as api:
        yield api


@pytest.fixture(scope="session")
def deployed(admin: k8s.ApiClient) -> str:
    """The shipped manifests, applied (all but the bot's Deployment, whose image is not in
    the cluster); the sandbox namespace."""
    apply_base(admin)
    return NAMESPACE


def apply_base(admin: k8s.ApiClient) -> None:
    """The shipped manifests the bot's Pods need (namespaces, its account, policies)."""
    for name in ("namespaces.yaml", "rbac.yaml", "networkpolicy.yaml", "runtimeclass.yaml"):
        apply(admin, [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d])


def apply(admin: k8s.ApiClient, documents: list[dict[str, Any]]) -> None:
    """As `kubectl apply --server-side`: creates, or brings an existing object (such as the
    `default` account the cluster makes with each namespace) in line with the manifest."""
    dynamic = DynamicClient(admin)
    for document in documents:
        resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        dynamic.server_side_apply(
            resource, body=document, field_manager="cellmate-tests", force_conflicts=True
        )


@pytest.fixture(scope="session")
def bot_kubeconfig(
    admin: k8s.ApiClient, deployed: str, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A kubeconfig with the bot's service account token, for the cluster of the admin one."""
    core = k8s.CoreV1Api(admin)
    for _ in range(100):  # the token controller may take a moment after the account exists
        try:
            requested: Any = core.create_namespaced_service_account_token(
                BOT_ACCOUNT, BOT_NAMESPACE, {"spec": {"expirationSeconds": 7200}}
            )
            break
        except ApiException as exc:
            if exc.status != 404:
                raise
            time.sleep(0.1)
    config = yaml.safe_load(Path(KUBECONFIG).read_text())
    cluster = config["clusters"][0]
    bot = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "bot", "user": {"token": requested.status.token}}],
        "contexts": [{"name": "bot", "context": {"cluster": cluster["name"], "user": "bot"}}],
        "current-context": "bot",
    }
    path = tmp_path_factory.mktemp("kube") / "bot.kubeconfig"
    path.write_text(yaml.safe_dump(bot))
    return str(path)


def bot_client(bot_kubeconfig: str) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=bot_kubeconfig, client_configuration=configuration)
    return k8s.ApiClient(configuration)


def sandbox_pods(admin: k8s.ApiClient, instance: str = TEST_INSTANCE) -> list[str]:
    selector = f"{SANDBOX_LABEL}=1,{INSTANCE_LABEL}={instance}"
    pods = k8s.CoreV1Api(admin).list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return [str(pod.metadata.name) for pod in pods]


@pytest.fixture(autouse=True)
def no_sandbox_left_behind(admin: k8s.ApiClient, deployed: str) -> Iterator[None]:
    yield
    deadline = time.monotonic() + 60
    while sandbox_pods(admin) and time.monotonic() < deadline:
        time.sleep(0.2)  # deleted Pods take a moment to go
    assert sandbox_pods(admin) == [], "a sandbox Pod was left behind"


def settings(bot_kubeconfig: str, session_secret: str = "") -> KubernetesSettings:
    return KubernetesSettings(
        namespace=NAMESPACE,
        kubeconfig=bot_kubeconfig,
        runtime_class_runc=RUNTIME_CLASSES["runc"],
        runtime_class_runsc=RUNTIME_CLASSES["runsc"],
        image_pull_policy="Never",  # loaded onto the node: the cluster has no registry
        session_secret=session_secret,
    )


ON_GVISOR_TOO = {
    "test_code_that_tries_to_kill_the_runner",
    "test_forged_events_are_ignored",
    "test_the_runner_cannot_be_read_and_its_events_cannot_be_forged",
    "test_no_network",
    "test_memory_bomb",
}
"""The Docker integration tests, run again here, whose outcome can differ under gVisor; the
rest run on runc only (the cluster and the runner are the same on both)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "runtime" not in metafunc.fixturenames:
        return
    shared = metafunc.function.__module__.startswith("tests.integration.")
    both = not shared or metafunc.function.__name__ in ON_GVISOR_TOO
    metafunc.parametrize("runtime", list(RUNTIME_CLASSES) if both else ["runc"])


def make_executor(
    bot_kubeconfig: str,
    runtime: str = "runc",
    instance: str = TEST_INSTANCE,
    pool: PoolSettings = NO_POOL,
    session_secret: str = "",
    **limits: Any,
) -> Executor:
    backend = KubernetesBackend(
        default_tag(), settings(bot_kubeconfig, session_secret), instance=instance
    )
    chosen = SandboxLimits(runtime=runtime, **{"timeout_s": 20, **limits})  # type: ignore[arg-type]
    return Executor(default_tag(), limits=chosen, backend=backend, pool=pool)


@pytest.fixture
async def executor(bot_kubeconfig: str, runtime: str) -> AsyncIterator[Executor]:
    async with make_executor(bot_kubeconfig, runtime) as ex:
        yield ex


async def wait_until(predicate: Callable[[], bool], seconds: float = 60) -> None:
    """Poll what has no event to wait on (the pool's counters, the cluster's Pods)."""
    async with asyncio.timeout(seconds):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.1)


@pytest.fixture
def pooled(bot_kubeconfig: str, runtime: str) -> Callable[..., Executor]:
    """As the Docker suite's `pooled`: an executor with a warm pool of Pods."""

    def make(**pool: int) -> Executor:
        return make_executor(bot_kubeconfig, runtime, pool=PoolSettings(**pool))

    return make
