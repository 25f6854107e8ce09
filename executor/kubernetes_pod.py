"""What a sandbox Pod is: the settings that place it, its manifest (everything the cluster is
asked for, in one place), and how it comes up and ends, as the cluster reports them."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kubernetes import client as k8s

from executor.egress import PACKAGES_DIR, sandbox_environment
from executor.errors import ImageNotFound, SandboxError
from executor.kubernetes_seccomp import PROFILE_PATH
from executor.limits import SandboxLimits
from executor.protocol import ExitState

CONTAINER = "sandbox"
DATA_DIR = "/mnt/data"
START_POLL_S = 0.1
IMAGE_FAILURES = {"ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName"}
TERMINATION_MESSAGE_PATH = "/root/termination-log"
"""Where the kubelet bind-mounts the container's termination message: a file on the node's
disk, mode 0666, which no size limit of the Pod covers. Inside /root (root's, mode 0700 in
the image, on a read-only root) the sandbox's user cannot reach it; at /dev/termination-log
any code could fill it up to the file size limit."""


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """Where sandbox Pods go: `CELLMATE_KUBERNETES_<FIELD>`."""

    namespace: str = "cellmate-sandboxes"
    kubeconfig: str = ""
    """A kubeconfig file; empty: the Pod's own service account (in-cluster), else
    ~/.kube/config."""
    context: str = ""
    runtime_class_runc: str = ""
    """The RuntimeClass for `CELLMATE_SANDBOX_RUNTIME=runc`; empty: the cluster's default."""
    runtime_class_runsc: str = "gvisor"
    """The RuntimeClass for `CELLMATE_SANDBOX_RUNTIME=runsc`."""
    node_selector: tuple[str, ...] = ()
    """`key=value` pairs a sandbox's node must have."""
    tolerations: tuple[str, ...] = ()
    """`key=value:Effect` (or `key:Effect`) taints sandboxes tolerate."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    memory_backed: bool = True
    """/mnt/data and /tmp are in memory, counted in the Pod's memory limit. `false` (on the
    node's disk) is refused: the kubelet enforces an emptyDir's sizeLimit by eviction, tens
    of seconds after the fact, in which a sandbox writes gigabytes."""
    seccomp_profile: str = PROFILE_PATH
    """The Localhost seccomp profile of runc sandboxes, under the kubelet's seccomp folder
    (scripts/install-seccomp-profile.sh puts it on a node); `RuntimeDefault`: the runtime's
    default, which allows io_uring. gVisor sandboxes keep the runtime's default (gVisor answers the
    system calls itself)."""
    cpu_request: float = 0.1
    """CPUs a sandbox asks the scheduler for; its limit is CELLMATE_SANDBOX_CPUS. Sessions
    are idle most of the time, so requests below the limits fit many more on a node."""
    memory_request_mb: int = 256
    """Memory a sandbox asks the scheduler for; its limit is CELLMATE_SANDBOX_MEMORY_MB."""
    max_lifetime_s: int = 4 * 3600 + 600
    """The cluster ends any sandbox Pod after this long (activeDeadlineSeconds), even one
    that this process lost track of."""
    egress_proxy: str = ""
    """`HOST:PORT` of the egress proxy's Service as sandboxes reach it (allowlist mode);
    empty: the Service `cellmate-egress` of the bot's namespace, from the variables the
    cluster gives the bot's Pod (deploy/kubernetes/egress-proxy.yaml)."""
    egress_control: str = ""
    """`HOST:PORT` of the proxy's control port, where the bot answers its questions; empty:
    the same Service's `control` port."""
    egress_token_file: str = "/var/run/cellmate-egress/token"  # noqa: S105 (a path)
    """The token the bot shows on the control port (the Secret `cellmate-egress-token`)."""
    egress_ca_file: str = "/var/run/cellmate-egress-ca/ca-cert.pem"
    """The certificate of the CA the proxy adds secrets with (from the Secret
    `cellmate-egress-secrets`), which sandboxes then trust; no file: no secrets."""
    session_secret: str = field(default="", repr=False)
    """A secret that stays the same across restarts: each sandbox's key is made from it and
    the Pod's name, so a restarted bot attaches to its sessions' Pods again (their variables
    and files kept) instead of deleting them. Empty: a new secret per process, and sessions
    end with it."""

    def __post_init__(self) -> None:
        if not self.memory_backed:
            raise ValueError(
                "CELLMATE_KUBERNETES_MEMORY_BACKED=false is not supported: on the node's disk "
                "a sandbox's files are bounded only by eviction, tens of seconds late; "
                "/mnt/data and /tmp stay in memory (size them with CELLMATE_SANDBOX_DATA_MB "
                "and _TMP_MB)"
            )

    def runtime_class(self, runtime: str) -> str:
        return self.runtime_class_runsc if runtime == "runsc" else self.runtime_class_runc


EGRESS_LABEL = "cellmate.egress"
"""On sandbox Pods in allowlist mode: the NetworkPolicy that lets them reach the egress
proxy selects them by it (every other sandbox reaches nothing)."""
SERVICE_VARIABLES = ("CELLMATE_EGRESS_SERVICE_HOST", "CELLMATE_EGRESS_SERVICE_PORT")


def egress_address(configured: str, port_name: str = "") -> tuple[str, int] | None:
    """`HOST:PORT` as configured, else the egress Service's address from the variables the
    cluster gives Pods of its namespace (`_PORT_<NAME>` for a named port); None if neither."""
    if configured:
        host, _, port = configured.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{configured!r} is not HOST:PORT")
        return host.strip("[]"), int(port)
    host = os.environ.get(SERVICE_VARIABLES[0], "")
    suffix = f"_{port_name.upper()}" if port_name else ""
    port = os.environ.get(f"CELLMATE_EGRESS_SERVICE_PORT{suffix}", "")
    return (host, int(port)) if host and port.isdigit() else None


def egress_parts(limits: SandboxLimits, settings: KubernetesSettings) -> dict[str, Any]:
    """What allowlist mode adds to a sandbox Pod: its label, the proxy in its environment,
    and the place pip installs into (exec allowed, in memory, sized)."""
    proxy = egress_address(settings.egress_proxy, "proxy")
    if proxy is None:
        raise SandboxError(
            "CELLMATE_NETWORK=allowlist on Kubernetes needs the egress proxy's Service "
            "(deploy/kubernetes/egress-proxy.yaml) or CELLMATE_KUBERNETES_EGRESS_PROXY"
        )
    environment = sandbox_environment(proxy, limits.pip_index_url, limits.trusted_ca)
    return {
        "labels": {EGRESS_LABEL: "allowlist"},
        "env": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        "mount": {"name": "packages", "mountPath": PACKAGES_DIR},
        "volume": {
            "name": "packages",
            "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.packages_mb}Mi"},
        },
    }


def pod_manifest(
    image: str,
    name: str,
    limits: SandboxLimits,
    labels: Mapping[str, str],
    settings: KubernetesSettings,
) -> dict[str, Any]:
    """The Pod for one sandbox: everything the cluster is asked for, in one place."""
    threads = str(max(1, int(limits.cpus)))
    user = {"runAsNonRoot": True, "runAsUser": limits.uid, "runAsGroup": limits.gid}
    seccomp = seccomp_profile(limits.runtime, settings)
    requests = {
        "cpu": str(min(settings.cpu_request, limits.cpus)),
        "memory": f"{min(settings.memory_request_mb, limits.memory_mb)}Mi",
    }
    caps = {"cpu": str(limits.cpus), "memory": f"{limits.memory_mb}Mi"}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "activeDeadlineSeconds": settings.max_lifetime_s,
        "hostname": "sandbox",
        "securityContext": {
            **user,
            "fsGroup": limits.gid,
            # The Pod's own (pause) container keeps the default: a missing Localhost
            # profile then fails the sandbox container, with a reason the Pod reports.
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": settings.image_pull_policy,
                "stdin": True,
                "stdinOnce": False,
                "tty": False,
                "terminationMessagePath": TERMINATION_MESSAGE_PATH,
                "terminationMessagePolicy": "File",
                "workingDir": DATA_DIR,
                # Only these variables exist inside; nothing of the bot's environment.
                "env": [
                    {"name": "OMP_NUM_THREADS", "value": threads},
                    {"name": "OPENBLAS_NUM_THREADS", "value": threads},
                    {"name": "MKL_NUM_THREADS", "value": threads},
                    {"name": "CELLMATE_RUNNER_AWAIT_HELLO", "value": "1"},
                    {"name": "CELLMATE_PRELOAD", "value": ",".join(limits.preloaded())},
                    # A Pod has no per-file size limit of its own: the runner sets it.
                    {
                        "name": "CELLMATE_FILE_SIZE_BYTES",
                        "value": str(limits.file_size_mb * 1024 * 1024),
                    },
                ],
                "resources": {"requests": requests, "limits": caps},
                "securityContext": {
                    **user,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": seccomp,
                },
                "volumeMounts": [
                    {"name": "data", "mountPath": DATA_DIR},
                    {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108
                ],
            }
        ],
        "volumes": [
            {"name": "data", "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.data_mb}Mi"}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.tmp_mb}Mi"}},
        ],
    }
    runtime_class = settings.runtime_class(limits.runtime)
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if settings.node_selector:
        spec["nodeSelector"] = dict(_pair(item) for item in settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [_toleration(item) for item in settings.tolerations]
    all_labels = dict(labels)
    if limits.egress == "allowlist":
        parts = egress_parts(limits, settings)
        all_labels.update(parts["labels"])
        container = spec["containers"][0]
        container["env"] += parts["env"]
        container["volumeMounts"].append(parts["mount"])
        spec["volumes"].append(parts["volume"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
    }


def seccomp_profile(runtime: str, settings: KubernetesSettings) -> dict[str, str]:
    """The seccomp profile of a sandbox Pod under `runtime`."""
    if runtime == "runsc" or settings.seccomp_profile.lower() == "runtimedefault":
        return {"type": "RuntimeDefault"}
    return {"type": "Localhost", "localhostProfile": settings.seccomp_profile}


def _pair(item: str) -> tuple[str, str]:
    key, _, value = item.partition("=")
    return key.strip(), value.strip()


def _toleration(item: str) -> dict[str, str]:
    what, _, effect = item.rpartition(":")
    key, has_value, value = what.partition("=")
    toleration = {"key": key.strip(), "operator": "Equal" if has_value else "Exists"}
    if has_value:
        toleration["value"] = value.strip()
    if effect.strip():
        toleration["effect"] = effect.strip()
    return toleration


def wait_running(
    api: k8s.CoreV1Api,
    namespace: str,
    name: str,
    image: str,
    settings: KubernetesSettings,
    timeout_s: float,
) -> str | None:
    """Wait (blocking) until the Pod runs; its address on the Pod network. Why it cannot,
    as ImageNotFound or SandboxError."""
    deadline = time.monotonic() + timeout_s
    while True:
        pod: Any = api.read_namespaced_pod(name, namespace)
        if pod.status.phase == "Running":
            return str(pod.status.pod_ip) if pod.status.pod_ip else None
        if pod.status.phase in ("Failed", "Succeeded"):
            raise SandboxError(f"the sandbox Pod ended before it ran ({pod.status.reason})")
        for status in pod.status.container_statuses or []:
            waiting = status.state.waiting if status.state is not None else None
            if waiting is not None and waiting.reason in IMAGE_FAILURES:
                raise ImageNotFound(
                    f"The cluster cannot run the sandbox image {image} "
                    f"({waiting.reason}): load or push it where the nodes pull from."
                )
            if waiting is not None and "seccomp" in (waiting.message or ""):
                raise SandboxError(no_profile(pod, waiting.message, settings))
        if time.monotonic() > deadline:
            raise SandboxError(f"the sandbox Pod was not running after {timeout_s:g} s")
        time.sleep(START_POLL_S)


def no_profile(pod: Any, message: str, settings: KubernetesSettings) -> str:
    node = pod.spec.node_name or "its node"
    return (
        f"The sandbox's seccomp profile {settings.seccomp_profile!r} is not installed "
        f"on {node} ({message[:200]}). Install it on every node that runs sandboxes "
        "(scripts/install-seccomp-profile.sh, into the kubelet's seccomp folder), or set "
        "CELLMATE_KUBERNETES_SECCOMP_PROFILE=RuntimeDefault to run runc sandboxes under "
        "the runtime's default profile, which allows io_uring."
    )


def exit_state(pod: Any) -> ExitState:
    statuses = pod.status.container_statuses or []
    state = statuses[0].state if statuses else None
    terminated = state.terminated if state is not None else None
    if terminated is not None:
        return ExitState(
            running=False,
            exit_code=terminated.exit_code,
            oom_killed=terminated.reason == "OOMKilled",
        )
    return ExitState(running=pod.status.phase == "Running", exit_code=None, oom_killed=False)
