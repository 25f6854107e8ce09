"""What the bot's own identity can make in the sandbox namespace, on the test cluster (v1.24),
with the shipped manifests: the priority, count and resource quotas, the LimitRange, the
namespace's account (no token, no Secret) and RBAC refuse Pods and requests that are not a
sandbox's. What v1.24 cannot refuse (nodeName, tolerations, image, unsized emptyDir, no
deadline, exec into another Pod) is the admission policy's, whose CEL is tested in
tests/unit/test_admission_policy.py; here it is run on the Pod the API server itself makes of
the executor's.

Attacks run in a namespace of their own, made from the shipped sandbox-namespace manifests
and deleted at the end; every Pod they could get admitted has a nodeSelector no node has,
so even a Pod that should have been refused never runs or preempts anything."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from bot.ops.cluster_enforcement import enforcement
from bot.ops.findings import Finding
from bot.settings import load_settings
from executor import SandboxLimits, default_tag
from executor.kubernetes_backend import KubernetesBackend, pod_manifest
from tests.kubernetes.conftest import (
    BOT_NAMESPACE,
    KUBECONFIG,
    MANIFESTS,
    NAMESPACE,
    TEST_INSTANCE,
    apply,
    bot_client,
    settings,
)
from tests.unit.test_admission_policy import Policy

pytestmark = pytest.mark.kubernetes
SHIPPED = ("namespaces.yaml", "rbac.yaml", "networkpolicy.yaml")
NOWHERE = "cellmate.test/nowhere"
Pod = dict[str, Any]


def shipped_documents(namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The shipped manifests; those of the sandbox namespace moved to `namespace`."""
    found = []
    for name in SHIPPED:
        for document in yaml.safe_load_all((MANIFESTS / name).read_text()):
            metadata = document["metadata"]
            if document["kind"] == "Namespace" and metadata["name"] == NAMESPACE:
                metadata["name"] = namespace
            elif metadata.get("namespace") == NAMESPACE:
                metadata["namespace"] = namespace
            elif namespace != NAMESPACE and (
                document["kind"] == "Namespace" or metadata.get("namespace") == BOT_NAMESPACE
            ):
                continue  # the bot's own namespace and account are shared
            found.append(document)
    return found


def wait_for_quotas(admin: k8s.ApiClient, namespace: str, **hard: str) -> None:
    """Until the quota controller has counted the namespace (admission refuses Pods until
    then), and any changed hard limit is in force."""
    core = k8s.CoreV1Api(admin)
    deadline = time.monotonic() + 60
    while True:
        quotas = core.list_namespaced_resource_quota(namespace).items
        ready = bool(quotas) and all(
            q.status.hard is not None and q.status.used is not None for q in quotas
        )
        counted = {k: v for q in quotas for k, v in (q.status.hard or {}).items()}
        if ready and all(counted.get(k) == v for k, v in hard.items()):
            return
        assert time.monotonic() < deadline, f"quotas not counted in {namespace}: {quotas}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def shipped(admin: k8s.ApiClient, deployed: str) -> str:
    """The shared sandbox namespace as the manifests ship it (the session's `deployed` only
    creates what is missing)."""
    apply(admin, shipped_documents())
    wait_for_quotas(admin, NAMESPACE)
    return NAMESPACE


@contextlib.contextmanager
def sandbox_namespace(admin: k8s.ApiClient, kinds: Collection[str] = ()) -> Iterator[str]:
    """A namespace of its own made from the sandbox namespace's manifests (only `kinds` of
    them, if given), deleted afterwards."""
    instance = re.sub(r"[^a-z0-9-]", "-", TEST_INSTANCE.lower())[:20].strip("-")
    namespace = f"cellmate-adm-{instance}-{uuid.uuid4().hex[:6]}"
    documents = [d for d in shipped_documents(namespace) if not kinds or d["kind"] in kinds]
    try:
        apply(admin, documents)
        if any(d["kind"] == "ResourceQuota" for d in documents):
            wait_for_quotas(admin, namespace)
        yield namespace
    finally:
        core = k8s.CoreV1Api(admin)
        core.delete_namespace(namespace)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                core.read_namespace(namespace)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise
            time.sleep(0.2)
        else:
            pytest.fail(f"namespace {namespace} was not deleted")


@pytest.fixture(scope="module")
def attacked(admin: k8s.ApiClient, shipped: str) -> Iterator[str]:
    """The sandbox namespace's manifests in a namespace of their own, for the bot to attack."""
    with sandbox_namespace(admin) as namespace:
        yield namespace


@pytest.fixture(scope="module")
def bot(bot_kubeconfig: str) -> Iterator[k8s.CoreV1Api]:
    with bot_client(bot_kubeconfig) as api:
        yield k8s.CoreV1Api(api)


def sandbox_pod(runtime: str = "runc", nowhere: bool = True) -> Pod:
    """The executor's own Pod, as its backend builds it."""
    backend = KubernetesBackend(default_tag(), settings("unused"), instance=TEST_INSTANCE)
    name = f"cellmate-{uuid.uuid4().hex[:16]}"
    pod = pod_manifest(
        default_tag(), name, SandboxLimits(runtime=runtime), backend.labels, backend.settings
    )
    if nowhere:
        pod["spec"]["nodeSelector"] = {NOWHERE: name}
    return pod


def attack(change: Callable[[Pod], object]) -> Pod:
    pod = sandbox_pod()
    change(pod)
    return pod


def refused(create: Callable[[], object]) -> str:
    """The API server's refusal (403 Forbidden or 422 Invalid), as the bot would read it."""
    with pytest.raises(ApiException) as caught:
        create()
    assert caught.value.status in (403, 422), caught.value
    return str(caught.value.body)


def test_no_priority_class_is_accepted(
    admin: k8s.ApiClient, bot: k8s.CoreV1Api, attacked: str
) -> None:
    custom = f"cellmate-test-{uuid.uuid4().hex[:6]}"
    scheduling = k8s.SchedulingV1Api(admin)
    scheduling.create_priority_class({"metadata": {"name": custom}, "value": 1_000_000})
    try:
        for name in ("system-node-critical", "system-cluster-critical", custom):
            pod = attack(lambda p, name=name: p["spec"].update(priorityClassName=name))  # type: ignore[misc]
            body = refused(lambda pod=pod: bot.create_namespaced_pod(attacked, pod))  # type: ignore[misc]
            assert "exceeded quota: cellmate-no-priority-class" in body, body
        # A priority without its class is the Priority admission plugin's to refuse.
        pod = attack(lambda p: p["spec"].update(priority=2_000_001_000))
        body = refused(lambda: bot.create_namespaced_pod(attacked, pod))
        assert "the integer value of priority" in body, body
    finally:
        scheduling.delete_priority_class(custom)


def test_every_container_gets_limits_and_none_may_exceed_the_maximum(
    bot: k8s.CoreV1Api, attacked: str
) -> None:
    bare = attack(lambda p: p["spec"]["containers"][0].pop("resources"))
    made: Any = bot.create_namespaced_pod(attacked, bare, dry_run="All")
    resources = made.spec.containers[0].resources
    assert resources.limits == {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}
    assert resources.requests == {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "64Mi"}
    # An emptyDir without a size on the node's disk is held to that limit by the kubelet.
    for resource, amount in (("cpu", "64"), ("memory", "64Gi"), ("ephemeral-storage", "100Gi")):
        pod = attack(
            lambda p, r=resource, a=amount: (
                p["spec"]["containers"][0]["resources"]  # type: ignore[misc]
                .setdefault("limits", {})
                .update({r: a})
            )
        )
        body = refused(lambda pod=pod: bot.create_namespaced_pod(attacked, pod))  # type: ignore[misc]
        assert f"maximum {resource} usage per Container" in body, body


def test_the_pod_count_quota_refuses_one_pod_more(
    admin: k8s.ApiClient, bot: k8s.CoreV1Api, attacked: str
) -> None:
    core = k8s.CoreV1Api(admin)
    core.patch_namespaced_resource_quota(
        "cellmate-sandboxes", attacked, {"spec": {"hard": {"pods": "2"}}}
    )
    wait_for_quotas(admin, attacked, pods="2")
    made = []
    try:
        for _ in range(2):
            pod = sandbox_pod()
            bot.create_namespaced_pod(attacked, pod)
            made.append(pod["metadata"]["name"])
        body = refused(lambda: bot.create_namespaced_pod(attacked, sandbox_pod()))
        assert "exceeded quota: cellmate-sandboxes" in body, body
        assert "limited: pods=2" in body, body
    finally:
        for name in made:
            bot.delete_namespaced_pod(name, attacked, grace_period_seconds=0)


def test_no_secret_can_reach_a_sandbox_pod(
    admin: k8s.ApiClient, bot: k8s.CoreV1Api, attacked: str
) -> None:
    """The namespace's account lists no Secret, and v1.24 holds Secret volumes and variables
    to that list; a projected Secret or `envFrom` it lets through (the admission policy
    refuses both) finds nothing: the namespace cannot hold a Secret."""
    secret_ref = {"name": "cellmate-secrets", "key": "DISCORD_TOKEN"}
    for change in (
        lambda p: p["spec"]["volumes"].append(
            {"name": "s", "secret": {"secretName": "cellmate-secrets"}}
        ),
        lambda p: p["spec"]["volumes"].append(
            {"name": "s", "secret": {"secretName": "cellmate-secrets", "optional": True}}
        ),
        lambda p: p["spec"]["containers"][0]["env"].append(
            {"name": "X", "valueFrom": {"secretKeyRef": secret_ref}}
        ),
    ):
        pod = attack(change)
        body = refused(lambda pod=pod: bot.create_namespaced_pod(attacked, pod))  # type: ignore[misc]
        assert "not allowed because service account default does not reference" in body, body
        assert "cellmate-secrets" in body, body
    # Nor can the namespace hold a Secret or a volume claim to mount, whoever makes it.
    core = k8s.CoreV1Api(admin)
    body = refused(
        lambda: core.create_namespaced_secret(
            attacked, {"metadata": {"name": "planted"}, "stringData": {"k": "v"}}
        )
    )
    assert "exceeded quota: cellmate-sandboxes" in body, body
    claim = {
        "metadata": {"name": "planted"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    body = refused(lambda: core.create_namespaced_persistent_volume_claim(attacked, claim))
    assert "exceeded quota: cellmate-sandboxes" in body, body


def test_host_paths_and_host_namespaces_are_refused(bot: k8s.CoreV1Api, attacked: str) -> None:
    for change in (
        lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        lambda p: p["spec"]["volumes"].append(
            {"name": "h", "hostPath": {"path": "/var/run/containerd"}}
        ),
        lambda p: p["spec"].update(hostNetwork=True),
        lambda p: p["spec"].update(hostPID=True),
    ):
        pod = attack(change)
        body = refused(lambda pod=pod: bot.create_namespaced_pod(attacked, pod))  # type: ignore[misc]
        assert "violates PodSecurity" in body, body


def test_sandbox_pods_get_no_token_and_the_namespaces_account_may_do_nothing(
    admin: k8s.ApiClient, bot: k8s.CoreV1Api, attacked: str
) -> None:
    def token_volumes(pod: Pod) -> list[str]:
        made: Any = bot.create_namespaced_pod(attacked, pod, dry_run="All")
        return [
            v.name
            for v in made.spec.volumes or []
            if v.projected is not None
            and any(s.service_account_token for s in v.projected.sources or [])
        ]

    # Left to the namespace's account, a Pod gets no token.
    assert token_volumes(attack(lambda p: p["spec"].pop("automountServiceAccountToken"))) == []
    # v1.24 mounts one when a Pod asks (the admission policy refuses that): it is worthless.
    assert token_volumes(attack(lambda p: p["spec"].update(automountServiceAccountToken=True)))
    requested: Any = k8s.CoreV1Api(admin).create_namespaced_service_account_token(
        "default", attacked, {"spec": {"expirationSeconds": 600}}
    )
    configuration = k8s.Configuration(
        host=admin.configuration.host,
        api_key={"authorization": f"Bearer {requested.status.token}"},
    )
    configuration.ssl_ca_cert = admin.configuration.ssl_ca_cert
    with k8s.ApiClient(configuration) as sandbox_identity:
        core = k8s.CoreV1Api(sandbox_identity)
        for forbidden in (
            lambda: core.list_namespaced_pod(attacked),
            lambda: core.list_namespaced_secret(attacked),
            lambda: core.create_namespaced_pod(attacked, sandbox_pod()),
            lambda: core.read_namespaced_service_account("default", attacked),
        ):
            with pytest.raises(ApiException) as denied:
                forbidden()
            assert denied.value.status == 403


def test_the_bot_cannot_change_a_pod_or_add_a_container_to_it(
    bot: k8s.CoreV1Api, attacked: str
) -> None:
    pod = sandbox_pod()
    name = pod["metadata"]["name"]
    bot.create_namespaced_pod(attacked, pod)
    try:
        debug = {"name": "debug", "image": "busybox:1", "targetContainerName": "sandbox"}
        for change in (
            lambda: bot.patch_namespaced_pod_ephemeralcontainers(
                name, attacked, {"spec": {"ephemeralContainers": [debug]}}
            ),
            lambda: bot.patch_namespaced_pod(
                name,
                attacked,
                {"spec": {"containers": [{"name": "sandbox", "image": "busybox:1"}]}},
            ),
            lambda: bot.patch_namespaced_pod(name, attacked, {"metadata": {"labels": {"x": "y"}}}),
        ):
            with pytest.raises(ApiException) as denied:
                change()
            assert denied.value.status == 403
            assert "forbidden" in str(denied.value.body)
    finally:
        bot.delete_namespaced_pod(name, attacked, grace_period_seconds=0)


def test_the_bots_role_is_what_the_executor_uses(bot_kubeconfig: str, shipped: str) -> None:
    with bot_client(bot_kubeconfig) as api:
        review: Any = k8s.AuthorizationV1Api(api).create_self_subject_rules_review(
            {"spec": {"namespace": shipped}}
        )
    granted = {
        (resource, verb)
        for rule in review.status.resource_rules
        for resource in rule.resources or []
        for verb in rule.verbs
        if "authorization.k8s.io" not in (rule.api_groups or [])
    }
    assert granted == {
        ("pods", "create"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "delete"),
        ("pods/attach", "create"),
        ("pods/attach", "get"),
        ("pods/exec", "create"),
        ("pods/exec", "get"),
    }


def test_the_policy_admits_the_pod_the_api_server_makes_of_the_executors(
    admin: k8s.ApiClient, bot: k8s.CoreV1Api, shipped: str
) -> None:
    """The admission policy's CEL on the executor's Pod after the API server's defaults and
    mutating admission (ServiceAccount, Priority, DefaultTolerationSeconds, LimitRanger)."""
    policy = Policy("cellmate-sandbox-pods")
    for runtime in ("runsc", "runc"):
        made: Any = bot.create_namespaced_pod(
            shipped, sandbox_pod(runtime, nowhere=False), dry_run="All"
        )
        admitted = admin.sanitize_for_serialization(made)
        expected = (
            [] if runtime == "runsc" else ["a sandbox Pod runs under the sandbox RuntimeClass"]
        )
        assert policy.refusals(admitted) == expected, runtime
        with_runc = Policy("cellmate-sandbox-pods", {"runtimeClasses": "['gvisor', 'runc']"})
        assert with_runc.refusals(admitted) == []


async def doctor_findings(kubeconfig: str, namespace: str, tmp_path: Path) -> dict[str, Finding]:
    settings = load_settings(
        {
            "CELLMATE_EXECUTOR_BACKEND": "kubernetes",
            "CELLMATE_KUBERNETES_NAMESPACE": namespace,
            "CELLMATE_KUBERNETES_KUBECONFIG": kubeconfig,
            "CELLMATE_KUBERNETES_RUNTIME_CLASS_RUNC": "runc",
            "CELLMATE_KUBERNETES_IMAGE_PULL_POLICY": "Never",
            "CELLMATE_KUBERNETES_ALLOW_RUNC": "1",
            "CELLMATE_INSTANCE": TEST_INSTANCE,
            "CELLMATE_DATA_DIR": str(tmp_path),
        },
        env_file=None,
    )
    backend = KubernetesBackend(settings.image, settings.kubernetes, instance=TEST_INSTANCE)
    try:
        return {f.name: f for f in await enforcement(backend, settings)}
    finally:
        await backend.close()


async def test_doctor_reports_what_the_cluster_enforces(
    admin: k8s.ApiClient, bot_kubeconfig: str, shipped: str, tmp_path: Path
) -> None:
    found = await doctor_findings(bot_kubeconfig, shipped, tmp_path)
    for name in ("priority", "limits", "token", "rbac"):
        assert found[name].ok, found[name]
    assert "exceeded quota: cellmate-no-priority-class" in found["priority"].detail
    assert "LimitRange's (cpu 1, memory 1Gi); one over the maximum is refused" in (
        found["limits"].detail
    )
    assert found["rbac"].detail == f"this identity may do only what sandboxes need in {shipped}"
    admission = found["admission"]
    assert (admission.ok, admission.required) == (False, False)
    assert admission.detail.startswith(
        "Kubernetes 1.24 cannot run the ValidatingAdmissionPolicy (1.30 or later)"
    )
    network = found["network"]  # the kit has no network plugin that enforces NetworkPolicy
    assert not network.ok
    assert "NO NETWORKPOLICY-ENFORCING NETWORK PLUGIN IS EVIDENT" in network.detail
    assert "EVERY runc SANDBOX CAN REACH EVERY OTHER SANDBOX POD" in network.detail

    # A namespace with the Role and PodSecurity only: each missing piece is named.
    with sandbox_namespace(admin, kinds=("Namespace", "Role", "RoleBinding")) as bare:
        found = await doctor_findings(bot_kubeconfig, bare, tmp_path)
    assert not found["priority"].ok
    assert "would preempt other namespaces' Pods" in found["priority"].detail
    assert not found["limits"].ok
    assert "admits a container without CPU and memory limits" in found["limits"].detail
    assert not found["token"].ok
    assert found["token"].detail == (
        f"in {bare}, Pods get an API token by default and Pods may mount Secrets"
    )
    assert all(f.required for name, f in found.items() if name in ("priority", "limits", "token"))

    # An administrator's identity is more than the bot needs.
    as_admin = await doctor_findings(KUBECONFIG, shipped, tmp_path)
    assert not as_admin["rbac"].ok
    assert "may do more in" in as_admin["rbac"].detail
