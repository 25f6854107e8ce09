"""The shipped manifests against the API schema, and the admission policy's CEL on sample
Pods: the executor's own Pod (built by the backend's real code) is admitted, and each way of
making a Pod that is not a sandbox is refused with the rule that names it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from kubernetes_validate import utils as schemas

from executor.kubernetes_backend import KubernetesBackend, KubernetesSettings, pod_manifest
from executor.limits import SandboxLimits

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
POLICY_FILE = MANIFESTS / "admission-policy.yaml"
NAMESPACE = "cellmate-sandboxes"
BOT = "system:serviceaccount:cellmate:cellmate"
IMAGE = "cellmate-sandbox:0123abcd"
Pod = dict[str, Any]


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


class Policy:
    """One ValidatingAdmissionPolicy, evaluated as the API server does: its variables in
    order, its match conditions, then every validation. An expression that cannot be
    evaluated fails the test (on a cluster it would refuse every request)."""

    def __init__(self, name: str, variables: Mapping[str, str] | None = None) -> None:
        (self.document,) = [
            doc
            for doc in documents(POLICY_FILE)
            if doc["kind"] == "ValidatingAdmissionPolicy" and doc["metadata"]["name"] == name
        ]
        self.spec = self.document["spec"]
        self.overrides = dict(variables or {})
        self.env = celpy.Environment()

    def _eval(self, expression: str, activation: Mapping[str, Any]) -> Any:
        program = self.env.program(self.env.compile(expression))
        try:
            return program.evaluate(dict(activation))
        except CELEvalError as exc:
            raise AssertionError(f"{expression!r} cannot be evaluated: {exc}") from exc

    def refusals(
        self,
        obj: Pod | None,
        operation: str = "CREATE",
        name: str = "",
        sub_resource: str = "",
        old: Pod | None = None,
        user: str = BOT,
    ) -> list[str]:
        """The messages of the validations this request fails; [] when admitted."""
        request = {
            "operation": operation,
            "name": name or (obj or old or {}).get("metadata", {}).get("name", ""),
            "namespace": NAMESPACE,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": sub_resource,
            "userInfo": {"username": user},
        }
        activation: dict[str, Any] = {
            "object": json_to_cel(obj),
            "oldObject": json_to_cel(old),
            "request": json_to_cel(request),
        }
        variables: dict[celtypes.StringType, Any] = {}
        for variable in self.spec.get("variables", []):
            expression = self.overrides.get(variable["name"], variable["expression"])
            activation["variables"] = celtypes.MapType(variables)
            variables[celtypes.StringType(variable["name"])] = self._eval(expression, activation)
        activation["variables"] = celtypes.MapType(variables)
        for condition in self.spec.get("matchConditions", []):
            if not self._eval(condition["expression"], activation):
                return []
        refused = []
        for validation in self.spec["validations"]:
            verdict = self._eval(validation["expression"], activation)
            assert isinstance(verdict, celtypes.BoolType), validation["expression"]
            if not verdict:
                refused.append(" ".join(validation["message"].split()))
        return refused


def executor_pod(
    limits: SandboxLimits | None = None, **settings: Any
) -> tuple[Pod, KubernetesSettings]:
    chosen = KubernetesSettings(**settings)
    backend = KubernetesBackend(IMAGE, chosen, instance="prod")
    limits = limits or SandboxLimits(runtime="runsc")
    return pod_manifest(IMAGE, "cellmate-0123456789abcdef", limits, backend.labels, chosen), chosen


def as_admitted(pod: Pod) -> Pod:
    """The Pod as validating admission sees it: with the API server's defaults and what the
    mutating admission plugins (ServiceAccount, Priority, DefaultTolerationSeconds) add."""
    admitted = copy.deepcopy(pod)
    spec = admitted["spec"]
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        spec["tolerations"].append(
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        )
    for container in spec["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
    return admitted


PODS = Policy("cellmate-sandbox-pods")
REACH = Policy("cellmate-bot-reach")


def test_every_shipped_manifest_matches_the_api_schema() -> None:
    oldest, newest = schemas.all_versions()[0], schemas.latest_version()
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        # The admission policy's kinds are GA (admissionregistration.k8s.io/v1) from 1.30.
        versions = ("1.30", newest) if path == POLICY_FILE else (oldest, newest)
        for document in documents(path):
            for version in versions:
                kubernetes_validate.validate(document, version, strict=True)


def test_the_policy_is_applied_on_its_own_and_binds_to_the_sandbox_namespace() -> None:
    kustomized = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    assert POLICY_FILE.name not in kustomized["resources"]  # older clusters refuse unknown kinds
    bindings = [d for d in documents(POLICY_FILE) if d["kind"].endswith("Binding")]
    assert {b["spec"]["policyName"] for b in bindings} == {
        "cellmate-sandbox-pods",
        "cellmate-bot-reach",
    }
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
        assert selector == {"kubernetes.io/metadata.name": NAMESPACE}


@pytest.mark.parametrize(
    ("limits", "settings"),
    [
        (SandboxLimits(runtime="runsc"), {}),
        (SandboxLimits(runtime="runsc", memory_mb=4096, cpus=2.0), {"cpu_request": 2.0}),
        (SandboxLimits(runtime="runsc"), {"image_pull_policy": "Never", "max_lifetime_s": 600}),
        (SandboxLimits(runtime="runsc", egress="allowlist"), {"egress_proxy": "10.96.0.9:3128"}),
    ],
)
def test_the_executors_own_pod_is_admitted(limits: SandboxLimits, settings: dict[str, Any]) -> None:
    pod, _ = executor_pod(limits, **settings)
    assert PODS.refusals(as_admitted(pod)) == []
    assert PODS.refusals(pod) == []  # as sent, before the server's defaults too


def test_configured_placement_and_runc_are_admitted_only_when_the_policy_names_them() -> None:
    pod, _ = executor_pod(
        node_selector=("pool=sandboxes", "disk=ssd"),
        tolerations=("dedicated=sandboxes:NoSchedule", "gvisor:NoExecute"),
    )
    assert "a sandbox Pod has the sandbox nodeSelector, no other" in PODS.refusals(pod)
    assert "a sandbox Pod tolerates the sandbox taints only" in PODS.refusals(pod)
    placed = Policy(
        "cellmate-sandbox-pods",
        {
            "nodeSelector": "['pool=sandboxes', 'disk=ssd']",
            "tolerations": "['dedicated=sandboxes:NoSchedule', 'gvisor:NoExecute']",
        },
    )
    assert placed.refusals(as_admitted(pod)) == []

    runc, _ = executor_pod(SandboxLimits(runtime="runc"))
    assert PODS.refusals(as_admitted(runc)) == ["a sandbox Pod runs under the sandbox RuntimeClass"]
    allowed = Policy("cellmate-sandbox-pods", {"runtimeClasses": "['gvisor', '']"})
    assert allowed.refusals(as_admitted(runc)) == []


def _spec(change: Callable[[Pod], object]) -> Callable[[Pod], None]:
    def apply(pod: Pod) -> None:
        change(pod["spec"])

    return apply


def _container(change: Callable[[Pod], object]) -> Callable[[Pod], None]:
    def apply(pod: Pod) -> None:
        change(pod["spec"]["containers"][0])

    return apply


def _security(**values: Any) -> Callable[[Pod], None]:
    return _container(lambda c: c["securityContext"].update(values))


def _pod_security(**values: Any) -> Callable[[Pod], None]:
    return _spec(lambda s: s["securityContext"].update(values))


def _volume(source: dict[str, Any]) -> Callable[[Pod], None]:
    return _spec(lambda s: s["volumes"].append({"name": "extra", **source}))


PRIORITY = "a sandbox Pod has no PriorityClass"
PLACEMENT = "a sandbox Pod is placed by the scheduler: no nodeName, affinity or other scheduler"
TOLERATIONS = "a sandbox Pod tolerates the sandbox taints only"
SELECTOR = "a sandbox Pod has the sandbox nodeSelector, no other"
RESOURCES = "a sandbox container has CPU and memory requests and limits"
DEADLINE = "a sandbox Pod has a deadline (activeDeadlineSeconds) within the sandbox lifetime"
IMAGE_ONLY = "a sandbox Pod runs the sandbox image only"
ONE_CONTAINER = "a sandbox Pod has one container: no init or ephemeral containers"
RUNTIME = "a sandbox Pod runs under the sandbox RuntimeClass"
VOLUMES = "a sandbox Pod has size-limited in-memory emptyDir volumes only"
CREDENTIALS = "a sandbox Pod holds no API token and no Secret"
HOST = "a sandbox Pod shares no namespace with the node"
USER = "a sandbox Pod runs as the sandbox user with a seccomp profile"
CONTAINER = (
    "a sandbox container drops every capability, cannot gain privileges and has a read-only root"
)
NAMED = "a sandbox Pod is named cellmate-* and labelled cellmate.sandbox=1"
SIDECAR = {"name": "x", "image": "busybox:1", "command": ["sh"]}
ATTACKS: dict[str, tuple[Callable[[Pod], None], str]] = {
    "system-node-critical": (
        _spec(lambda s: s.update(priorityClassName="system-node-critical")),
        PRIORITY,
    ),
    "system-cluster-critical": (
        _spec(lambda s: s.update(priorityClassName="system-cluster-critical")),
        PRIORITY,
    ),
    "a custom priority class": (_spec(lambda s: s.update(priorityClassName="high")), PRIORITY),
    "nodeName": (_spec(lambda s: s.update(nodeName="k8snode")), PLACEMENT),
    "node affinity": (
        _spec(
            lambda s: s.update(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": ["k8snode"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            )
        ),
        PLACEMENT,
    ),
    "another scheduler": (_spec(lambda s: s.update(schedulerName="mine")), PLACEMENT),
    "a nodeSelector of its own": (
        _spec(lambda s: s.update(nodeSelector={"kubernetes.io/hostname": "k8snode"})),
        SELECTOR,
    ),
    "tolerate everything": (
        _spec(lambda s: s.update(tolerations=[{"operator": "Exists"}])),
        TOLERATIONS,
    ),
    "tolerate every NoSchedule taint": (
        _spec(lambda s: s.update(tolerations=[{"operator": "Exists", "effect": "NoSchedule"}])),
        TOLERATIONS,
    ),
    "tolerate the control plane": (
        _spec(
            lambda s: s.update(
                tolerations=[
                    {
                        "key": "node-role.kubernetes.io/control-plane",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                ]
            )
        ),
        TOLERATIONS,
    ),
    "tolerate every effect of not-ready": (
        _spec(
            lambda s: s.update(
                tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
            )
        ),
        TOLERATIONS,
    ),
    "no resources": (_container(lambda c: c.pop("resources")), RESOURCES),
    "no limits": (_container(lambda c: c["resources"].pop("limits")), RESOURCES),
    "no cpu limit": (_container(lambda c: c["resources"]["limits"].pop("cpu")), RESOURCES),
    "no deadline": (_spec(lambda s: s.pop("activeDeadlineSeconds")), DEADLINE),
    "a deadline of 30 years": (
        _spec(lambda s: s.update(activeDeadlineSeconds=10**9)),
        DEADLINE,
    ),
    "any image": (_container(lambda c: c.update(image="busybox:latest")), IMAGE_ONLY),
    "a look-alike repository": (
        _container(lambda c: c.update(image="cellmate-sandbox-evil:1")),
        IMAGE_ONLY,
    ),
    "the sandbox image from another registry": (
        _container(lambda c: c.update(image="evil.example/cellmate-sandbox:1")),
        IMAGE_ONLY,
    ),
    "an init container": (_spec(lambda s: s.update(initContainers=[SIDECAR])), ONE_CONTAINER),
    "a second container": (_spec(lambda s: s["containers"].append(SIDECAR)), ONE_CONTAINER),
    "no RuntimeClass": (_spec(lambda s: s.pop("runtimeClassName")), RUNTIME),
    "RuntimeClass runc": (_spec(lambda s: s.update(runtimeClassName="runc")), RUNTIME),
    "an unsized emptyDir": (_volume({"emptyDir": {}}), VOLUMES),
    "an unsized memory emptyDir": (_volume({"emptyDir": {"medium": "Memory"}}), VOLUMES),
    "a sized emptyDir on the node's disk": (_volume({"emptyDir": {"sizeLimit": "1Gi"}}), VOLUMES),
    "a sized emptyDir of another medium": (
        _volume({"emptyDir": {"medium": "HugePages", "sizeLimit": "1Gi"}}),
        VOLUMES,
    ),
    "a Secret volume": (_volume({"secret": {"secretName": "cellmate-secrets"}}), VOLUMES),
    "a hostPath volume": (_volume({"hostPath": {"path": "/"}}), VOLUMES),
    "a PVC volume": (_volume({"persistentVolumeClaim": {"claimName": "data"}}), VOLUMES),
    "a CSI volume": (_volume({"csi": {"driver": "secrets-store.csi.k8s.io"}}), VOLUMES),
    "a ConfigMap volume": (_volume({"configMap": {"name": "kube-root-ca.crt"}}), VOLUMES),
    "a projected token volume": (
        _volume({"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}),
        VOLUMES,
    ),
    "the default token": (
        _spec(lambda s: s.update(automountServiceAccountToken=True)),
        CREDENTIALS,
    ),
    "the token left to the account": (
        _spec(lambda s: s.pop("automountServiceAccountToken")),
        CREDENTIALS,
    ),
    "another account": (_spec(lambda s: s.update(serviceAccountName="builder")), CREDENTIALS),
    "a Secret in the environment": (
        _container(
            lambda c: c["env"].append(
                {
                    "name": "X",
                    "valueFrom": {"secretKeyRef": {"name": "cellmate-secrets", "key": "k"}},
                }
            )
        ),
        CREDENTIALS,
    ),
    "a Secret as the environment": (
        _container(lambda c: c.update(envFrom=[{"secretRef": {"name": "cellmate-secrets"}}])),
        CREDENTIALS,
    ),
    "hostNetwork": (_spec(lambda s: s.update(hostNetwork=True)), HOST),
    "hostPID": (_spec(lambda s: s.update(hostPID=True)), HOST),
    "hostIPC": (_spec(lambda s: s.update(hostIPC=True)), HOST),
    "root": (_pod_security(runAsUser=0, runAsNonRoot=False), USER),
    "another user": (_pod_security(runAsUser=1000), USER),
    "no seccomp": (_pod_security(seccompProfile={"type": "Unconfined"}), USER),
    "sysctls": (_pod_security(sysctls=[{"name": "kernel.shm_rmid_forced", "value": "0"}]), USER),
    "privilege escalation": (_security(allowPrivilegeEscalation=True), CONTAINER),
    "privileged": (_security(privileged=True), CONTAINER),
    "an added capability": (
        _security(capabilities={"drop": ["ALL"], "add": ["NET_RAW"]}),
        CONTAINER,
    ),
    "capabilities kept": (_security(capabilities={"drop": []}), CONTAINER),
    "a writable root": (_security(readOnlyRootFilesystem=False), CONTAINER),
    "a root container": (_security(runAsUser=0), CONTAINER),
    "an unconfined container": (_security(seccompProfile={"type": "Unconfined"}), CONTAINER),
    "another name": (lambda pod: pod["metadata"].update(name="admin-debug"), NAMED),
    "no sandbox label": (lambda pod: pod["metadata"].update(labels={}), NAMED),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_pod_that_is_not_a_sandbox_is_refused(attack: str) -> None:
    change, rule = ATTACKS[attack]
    pod, _ = executor_pod()
    change(pod)
    assert rule in PODS.refusals(as_admitted(pod))


def test_an_ephemeral_container_is_refused() -> None:
    pod = as_admitted(executor_pod()[0])
    pod["spec"]["ephemeralContainers"] = [{**SIDECAR, "targetContainerName": "sandbox"}]
    refused = PODS.refusals(pod, "UPDATE", sub_resource="ephemeralcontainers", old=pod)
    assert refused == [ONE_CONTAINER]


def test_the_bot_execs_attaches_and_deletes_only_sandboxes() -> None:
    sandbox = as_admitted(executor_pod()[0])
    other = copy.deepcopy(sandbox)
    other["metadata"] = {"name": "admin-debug", "labels": {"app": "debug"}}
    exec_options = {"kind": "PodExecOptions", "command": ["sh"], "stdin": True}
    for sub in ("exec", "attach"):
        assert REACH.refusals(exec_options, "CONNECT", "cellmate-0123456789abcdef", sub) == []
        assert REACH.refusals(exec_options, "CONNECT", "admin-debug", sub) == [
            "the bot execs and attaches into sandbox Pods only"
        ]
        # Anyone else (an administrator) is not this policy's business.
        assert REACH.refusals(exec_options, "CONNECT", "admin-debug", sub, user="alice") == []
    assert REACH.refusals({}, "CONNECT", "cellmate-0123456789abcdef", "portforward") == [
        "the bot execs and attaches into sandbox Pods only"
    ]
    assert REACH.refusals(None, "DELETE", old=sandbox) == []
    assert REACH.refusals(None, "DELETE", old=other) == ["the bot deletes sandbox Pods only"]
