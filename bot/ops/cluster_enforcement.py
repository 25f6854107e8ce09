"""What the cluster enforces on the sandbox namespace, seen with the bot's own identity.

The bot may not read quotas, LimitRanges, ServiceAccounts or admission policies (its Role
holds Pods only), so each check asks the API server to admit the executor's own Pod with one
thing a sandbox never has, as a dry run (`dryRun=All`: admission runs in full, nothing is
stored or scheduled), and reads the answer. Which network plugin runs cannot be asked at all:
the API groups a plugin installs are the only sign that every identity can see."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from bot.ops.findings import Finding
from bot.settings import Settings
from executor.kubernetes_backend import KubernetesBackend, pod_manifest

POLICY_VERSION = (1, 30)
"""ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.30."""
NETWORK_PLUGINS = {
    "crd.projectcalico.org": "Calico",
    "projectcalico.org": "Calico",
    "cilium.io": "Cilium",
    "crd.antrea.io": "Antrea",
    "kubeovn.io": "Kube-OVN",
    "k8s.ovn.org": "OVN-Kubernetes",
    "networking.k8s.aws": "the AWS VPC CNI network policy agent",
}
"""API groups that a NetworkPolicy-enforcing network plugin installs, and its name."""
NEEDED = {("pods", verb) for verb in ("create", "get", "list", "delete")} | {
    (resource, verb) for resource in ("pods/attach", "pods/exec") for verb in ("create", "get")
}
"""What deploy/kubernetes/rbac.yaml grants: the executor's own requests."""
SELF_REVIEWS = {"authorization.k8s.io", "authentication.k8s.io"}
"""Reviews of one's own access, which every identity may make."""
SANDBOX_LABEL = "cellmate.sandbox"
FIX_NAMESPACE = "apply deploy/kubernetes/namespaces.yaml (kubectl apply -k deploy/kubernetes)"

Pod = dict[str, Any]


async def enforcement(backend: KubernetesBackend, settings: Settings) -> list[Finding]:
    api = await backend.api()
    probe = _Probe(api, backend, settings)
    return await asyncio.to_thread(
        lambda: [
            probe.priority(),
            probe.limits(),
            probe.token(),
            probe.admission_policy(),
            probe.rbac(),
            probe.only_sandboxes(),
            probe.network(),
        ]
    )


class _Probe:
    def __init__(self, api: k8s.CoreV1Api, backend: KubernetesBackend, settings: Settings):
        self.api = api
        self.client = api.api_client
        self.backend = backend
        self.settings = settings
        self.namespace = backend.namespace

    def _pod(self, change: Callable[[Pod], object]) -> Pod:
        name = f"cellmate-doctor-{uuid.uuid4().hex[:12]}"
        pod = pod_manifest(
            self.backend.image,
            name,
            self.settings.sandbox,
            self.backend.labels,
            self.settings.kubernetes,
        )
        change(pod)
        return pod

    def _admit(self, change: Callable[[Pod], object]) -> tuple[Any, str]:
        """The Pod as the cluster would store it, or None and the refusal."""
        body: Any = self._pod(change)
        try:
            return self.api.create_namespaced_pod(self.namespace, body, dry_run="All"), ""
        except ApiException as exc:
            return None, _message(exc)

    def priority(self) -> Finding:
        admitted, refusal = self._admit(
            lambda p: p["spec"].update(priorityClassName="system-node-critical")
        )
        if admitted is None:
            return Finding(
                "priority", True, f"a Pod with a system PriorityClass is refused ({refusal})"
            )
        return Finding(
            "priority",
            False,
            f"{self.namespace} admits a Pod with priorityClassName system-node-critical: it "
            "would preempt other namespaces' Pods",
            FIX_NAMESPACE + ": a ResourceQuota scoped by PriorityClass",
        )

    def limits(self) -> Finding:
        admitted, refusal = self._admit(lambda p: p["spec"]["containers"][0].pop("resources"))
        if admitted is not None:
            limits = admitted.spec.containers[0].resources.limits or {}
            if not {"cpu", "memory"} <= set(limits):
                return Finding(
                    "limits",
                    False,
                    f"{self.namespace} admits a container without CPU and memory limits",
                    FIX_NAMESPACE + ": a LimitRange",
                )
            defaults = f"cpu {limits['cpu']}, memory {limits['memory']}"
            detail = f"a container without resources gets the LimitRange's ({defaults})"
        else:
            detail = f"a container without resources is refused ({refusal})"
        huge, _ = self._admit(
            lambda p: p["spec"]["containers"][0]["resources"]["limits"].update(cpu="1000")
        )
        if huge is not None:
            return Finding(
                "limits",
                False,
                f"{detail}, but one that asks for 1000 CPUs is admitted",
                FIX_NAMESPACE + ": a LimitRange with max",
            )
        return Finding("limits", True, f"{detail}; one over the maximum is refused")

    def token(self) -> Finding:
        admitted, _ = self._admit(lambda p: p["spec"].pop("automountServiceAccountToken"))
        tokens = [
            volume.name
            for volume in (admitted.spec.volumes if admitted is not None else None) or []
            if volume.projected is not None
            and any(source.service_account_token for source in volume.projected.sources or [])
        ]
        secret, _ = self._admit(
            lambda p: p["spec"]["volumes"].append(
                {"name": "probe", "secret": {"secretName": "cellmate-doctor-probe"}}
            )
        )
        problems = []
        if tokens:
            problems.append("Pods get an API token by default")
        if secret is not None:
            problems.append("Pods may mount Secrets")
        if problems:
            return Finding(
                "token",
                False,
                f"in {self.namespace}, {' and '.join(problems)}",
                FIX_NAMESPACE + ": its default ServiceAccount (automountServiceAccountToken: "
                "false, kubernetes.io/enforce-mountable-secrets)",
            )
        return Finding(
            "token", True, f"Pods in {self.namespace} get no API token and may mount no Secret"
        )

    def admission_policy(self) -> Finding:
        found: Any = k8s.VersionApi(self.client).get_code()
        version = (int(found.major), int("".join(c for c in found.minor if c.isdigit())))
        shown = f"Kubernetes {found.major}.{found.minor.rstrip('+')}"
        admitted, refusal = self._admit(
            lambda p: p["spec"].update(
                nodeName="cellmate-doctor-probe", tolerations=[{"operator": "Exists"}]
            )
        )
        if admitted is None:
            return Finding(
                "admission",
                True,
                f"a Pod with its own node and every toleration is refused ({refusal})",
            )
        if version < POLICY_VERSION:
            return Finding(
                "admission",
                False,
                f"{shown} cannot run the ValidatingAdmissionPolicy (1.30 or later): the image, "
                "RuntimeClass, node, tolerations and volumes of Pods in "
                f"{self.namespace} are not pinned to the sandbox template",
                "upgrade the cluster and apply deploy/kubernetes/admission-policy.yaml, or "
                "enforce the same with an admission webhook",
                required=False,
            )
        return Finding(
            "admission",
            False,
            f"{shown} admits a Pod with its own node and every toleration in {self.namespace}",
            "kubectl apply -f deploy/kubernetes/admission-policy.yaml (its variables in step "
            "with the CELLMATE_* settings)",
        )

    def rbac(self) -> Finding:
        review: Any = k8s.AuthorizationV1Api(self.client).create_self_subject_rules_review(
            k8s.V1SelfSubjectRulesReview(
                spec=k8s.V1SelfSubjectRulesReviewSpec(namespace=self.namespace)
            )
        )
        granted = {
            (f"{resource}" if group == "" else f"{resource}.{group}", verb)
            for rule in review.status.resource_rules or []
            for group in rule.api_groups or [""]
            if group not in SELF_REVIEWS
            for resource in rule.resources or []
            for verb in rule.verbs
        }
        extra = sorted(f"{verb} {resource}" for resource, verb in granted - NEEDED)
        if extra:
            shown = ", ".join(extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
            return Finding(
                "rbac",
                False,
                f"this identity may do more in {self.namespace} than sandboxes need: {shown}",
                "run the bot with the cellmate ServiceAccount of deploy/kubernetes/rbac.yaml",
                required=False,
            )
        return Finding(
            "rbac", True, f"this identity may do only what sandboxes need in {self.namespace}"
        )

    def only_sandboxes(self) -> Finding:
        pods: Any = self.api.list_namespaced_pod(self.namespace)
        others = sorted(
            pod.metadata.name
            for pod in pods.items
            if (pod.metadata.labels or {}).get(SANDBOX_LABEL) != "1"
        )
        if others:
            return Finding(
                "namespace",
                False,
                f"{len(others)} Pod(s) in {self.namespace} are not sandboxes "
                f"({', '.join(others[:3])}): the bot may exec into them",
                "run them in another namespace",
                required=False,
            )
        return Finding("namespace", True, f"{self.namespace} holds sandboxes only")

    def network(self) -> Finding:
        groups: Any = k8s.ApisApi(self.client).get_api_versions()
        plugins = sorted(
            {NETWORK_PLUGINS[g.name] for g in groups.groups if g.name in NETWORK_PLUGINS}
        )
        if plugins:
            return Finding(
                "network",
                True,
                f"{', '.join(plugins)} is installed: NetworkPolicy (sandboxes-deny-all) is "
                "likely enforced",
            )
        runtime = self.settings.sandbox.runtime
        reach = (
            "EVERY runc SANDBOX CAN REACH EVERY OTHER SANDBOX POD (other people's sessions) "
            "and whatever else is on the Pod network"
            if runtime == "runc"
            else "gVisor sandboxes still reach other Pods unless the runtime gives them no network"
        )
        return Finding(
            "network",
            False,
            "NO NETWORKPOLICY-ENFORCING NETWORK PLUGIN IS EVIDENT (no Calico, Cilium, Antrea, "
            f"OVN API): {reach}. Plugins without API objects (kube-router, Weave Net) cannot "
            "be seen from here",
            "install a network plugin that enforces NetworkPolicy, or use "
            "CELLMATE_SANDBOX_RUNTIME=runsc with a RuntimeClass that has no network",
            required=False,
        )


def _message(exc: ApiException) -> str:
    try:
        message = str(json.loads(exc.body or "{}").get("message", ""))
    except ValueError:
        message = ""
    return " ".join((message or f"{exc.status} {exc.reason}").split())[:300]
