"""The bot deployed into the test cluster as the HA overlay ships it (deploy/kubernetes/ha):
a StatefulSet of replicas behind a Service, sharing PostgreSQL, each with its Discord shard.

What the test changes is only what the kit needs: the bot image as loaded onto the node
(never pulled), runc sandboxes (the kit's RuntimeClass), small CPU requests (one 2-core
node), the stand-ins' addresses, and the API server's address (the kit has no kube-proxy, so
Service addresses do not route: `kubernetes.default.svc` is pointed at the pod bridge, where
the API server listens, under a name its certificate holds)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from executor import default_tag
from executor.kubernetes_backend import INSTANCE_LABEL, SANDBOX_LABEL
from tests.kubernetes.conftest import NAMESPACE, apply
from tests.kubernetes.kit_network import BRIDGE_ADDRESS
from tests.support.kustomize import render

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "kubernetes" / "ha"
KIT = Path(os.environ.get("K8S_KIT", str(ROOT.parent / "shared" / "k8s-kit")))
BOT_NAMESPACE = "cellmate"
NAME = "cellmate"
SECRET = "cellmate-secrets"  # noqa: S105 - the Secret's name
SHUTDOWN_GRACE_S = 5
"""CELLMATE_SHUTDOWN_GRACE_S of the replicas: what a running turn gets when its replica goes."""
READY_S = 300.0
GONE_S = 180.0


def load_image(tag: str) -> None:
    """Copy an image from Docker onto the kit's node (a no-op once loaded)."""
    for attempt in range(3):
        done = subprocess.run(
            [str(KIT / "load-image"), tag], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            return
        time.sleep(5 * (attempt + 1))  # containerd busy beside a build: the kit says so
    raise AssertionError(f"could not load {tag} onto the cluster's node:\n{done.stderr}")


class Replicas:
    """The bot's StatefulSet in the kit, its Secret and its Service, and what the tests read
    off it (Pods, logs, readiness)."""

    def __init__(self, admin: k8s.ApiClient, image: str, instance: str, replicas: int = 3):
        self.admin = admin
        self.core = k8s.CoreV1Api(admin)
        self.apps = k8s.AppsV1Api(admin)
        self.image = image
        self.instance = instance
        self.replicas = replicas

    # ── deploy ───────────────────────────────────────────────────────────

    def deploy(self, secrets: dict[str, str], settings: dict[str, str]) -> None:
        self.core.create_namespaced_secret(
            BOT_NAMESPACE,
            {"metadata": {"name": SECRET, "namespace": BOT_NAMESPACE}, "stringData": secrets},
        )
        for document in self.documents(settings):
            apply(self.admin, [document])

    def documents(self, settings: dict[str, str]) -> list[dict[str, Any]]:
        """The overlay's bot objects (the StatefulSet, its Service and disruption budget),
        changed for the kit; the base's objects are applied by the `deployed` fixture, and
        the bundled PostgreSQL is left out (the test runs its own)."""
        wanted = {"StatefulSet", "Service", "PodDisruptionBudget"}
        found = [
            copy.deepcopy(d)
            for d in render(OVERLAY)
            if d["kind"] in wanted and d["metadata"]["name"] == NAME
        ]
        assert sorted(d["kind"] for d in found) == sorted(wanted), found
        for document in found:
            if document["kind"] == "StatefulSet":
                self._for_the_kit(document, settings)
        return found

    def _for_the_kit(self, statefulset: dict[str, Any], settings: dict[str, str]) -> None:
        statefulset["spec"]["replicas"] = self.replicas
        pod = statefulset["spec"]["template"]["spec"]
        pod["hostAliases"] = [{"ip": BRIDGE_ADDRESS, "hostnames": ["kubernetes.default.svc"]}]
        pod["terminationGracePeriodSeconds"] = 30
        (bot,) = [c for c in pod["containers"] if c["name"] == "bot"]
        bot["image"] = self.image
        bot["imagePullPolicy"] = "Never"
        bot["resources"] = {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"memory": "1Gi"},
        }
        bot["readinessProbe"]["periodSeconds"] = 2
        env = {e["name"]: e for e in bot.get("env", [])}
        kit = {
            "KUBERNETES_SERVICE_HOST": "kubernetes.default.svc",
            "KUBERNETES_SERVICE_PORT": "6443",
            "CELLMATE_INSTANCE": self.instance,
            "CELLMATE_SANDBOX_IMAGE": default_tag(),
            "CELLMATE_SANDBOX_RUNTIME": "runc",
            "CELLMATE_KUBERNETES_ALLOW_RUNC": "true",
            "CELLMATE_KUBERNETES_RUNTIME_CLASS_RUNC": "runc",
            "CELLMATE_KUBERNETES_IMAGE_PULL_POLICY": "Never",
            "CELLMATE_KUBERNETES_CPU_REQUEST": "0.01",
            "CELLMATE_KUBERNETES_MEMORY_REQUEST_MB": "64",
            "CELLMATE_POOL_SIZE": "0",
            "CELLMATE_DISCORD_COOLDOWN_S": "0",
            "CELLMATE_SLACK_COOLDOWN_S": "0",
            "CELLMATE_SLACK_MODE": "http",
            "CELLMATE_SHUTDOWN_GRACE_S": str(SHUTDOWN_GRACE_S),
            **settings,
        }
        for name, value in kit.items():
            env[name] = {"name": name, "value": value}
        bot["env"] = list(env.values())

    # ── read ─────────────────────────────────────────────────────────────

    def pods(self) -> list[Any]:
        found = self.core.list_namespaced_pod(BOT_NAMESPACE, label_selector=f"app={NAME}")
        return sorted(found.items, key=lambda p: p.metadata.name)

    def ready(self) -> list[str]:
        """The replicas whose readiness the cluster sees (the Service sends them requests)."""
        return [
            pod.metadata.name
            for pod in self.pods()
            if pod.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        ]

    async def wait_ready(self, count: int | None = None, seconds: float = READY_S) -> None:
        wanted = self.replicas if count is None else count
        deadline = time.monotonic() + seconds
        while len(self.ready()) < wanted:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(self.ready())} of {wanted} replicas ready after {seconds:g} s\n"
                    + self.describe()
                )
            await asyncio.sleep(1)

    async def wait_rolled(self, revision: str, seconds: float = READY_S) -> None:
        """Until every replica runs `revision` and is ready."""
        deadline = time.monotonic() + seconds
        while True:
            status = self.apps.read_namespaced_stateful_set_status(NAME, BOT_NAMESPACE).status
            if (
                status.update_revision == revision
                and status.current_revision == revision
                and (status.updated_replicas or 0) == self.replicas
                and len(self.ready()) == self.replicas
            ):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the rolling update did not finish: {status}")
            await asyncio.sleep(1)

    def revision(self) -> str:
        return str(
            self.apps.read_namespaced_stateful_set_status(
                NAME, BOT_NAMESPACE
            ).status.update_revision
        )

    def logs(self, pod: str, previous: bool = False) -> str:
        try:
            return str(
                self.core.read_namespaced_pod_log(
                    pod, BOT_NAMESPACE, container="bot", previous=previous
                )
            )
        except ApiException:
            return ""

    def served(self, conversation_part: str) -> set[str]:
        """The replicas whose logs say a turn finished in a conversation naming this part."""
        return {
            pod.metadata.name
            for pod in self.pods()
            if any(
                "turn finished" in line and conversation_part in line
                for line in self.logs(pod.metadata.name).splitlines()
            )
        }

    def keep_logs(self, directory: Path) -> None:
        """Every replica's whole log (and its previous container's), for a failure's report."""
        directory.mkdir(parents=True, exist_ok=True)
        for pod in self.pods():
            name = pod.metadata.name
            (directory / f"{name}.log").write_text(self.logs(name))
            (directory / f"{name}.previous.log").write_text(self.logs(name, previous=True))

    def describe(self) -> str:
        out = []
        for pod in self.pods():
            states = [
                json.dumps(c.state.to_dict(), default=str)[:300]
                for c in pod.status.container_statuses or []
            ]
            out.append(f"--- {pod.metadata.name} ({pod.status.phase}) {states}")
            out.append("\n".join(self.logs(pod.metadata.name).splitlines()[-40:]))
        return "\n".join(out)

    # ── change ───────────────────────────────────────────────────────────

    def delete(self, pod: str, grace_s: int | None = None) -> None:
        self.core.delete_namespaced_pod(pod, BOT_NAMESPACE, grace_period_seconds=grace_s)

    def roll(self) -> None:
        """A new revision of the Pod template, as an image update makes one."""
        stamp = {
            "spec": {
                "template": {"metadata": {"annotations": {"cellmate/rolled": str(time.time())}}}
            }
        }
        self.apps.patch_namespaced_stateful_set(NAME, BOT_NAMESPACE, stamp)

    # ── follow ───────────────────────────────────────────────────────────

    def follow_logs(self, directory: Path) -> threading.Event:
        """Every replica's log, as it is written, into `directory` (a replica deleted or
        replaced takes its log with it); set the returned event to stop."""
        stop = threading.Event()
        directory.mkdir(parents=True, exist_ok=True)
        for ordinal in range(self.replicas):
            name = f"{NAME}-{ordinal}"
            thread = threading.Thread(
                target=self._follow, args=(name, directory / f"{name}.log", stop), daemon=True
            )
            thread.start()
        return stop

    def _follow(self, pod: str, path: Path, stop: threading.Event) -> None:
        seen: set[str] = set()
        with path.open("a") as out:
            while not stop.is_set():
                try:
                    found = self.core.read_namespaced_pod(pod, BOT_NAMESPACE)
                    uid = str(found.metadata.uid)
                    if uid in seen or found.status.phase != "Running":
                        stop.wait(0.5)
                        continue
                    seen.add(uid)
                    out.write(f"=== {pod} ({uid}) ===\n")
                    stream = self.core.read_namespaced_pod_log(
                        pod, BOT_NAMESPACE, container="bot", follow=True, _preload_content=False
                    )
                    for chunk in stream.stream():
                        out.write(chunk.decode(errors="replace"))
                        out.flush()
                        if stop.is_set():
                            break
                except Exception as exc:  # the Pod went away, or is not there yet
                    out.write(f"--- {pod}: {type(exc).__name__}\n")
                    stop.wait(0.5)

    # ── remove ───────────────────────────────────────────────────────────

    async def remove(self) -> None:
        """The StatefulSet, its Service, budget and Secret, its Pods, and the sandboxes its
        replicas kept (they outlive the bot by design)."""
        for call, kind in (
            (self.apps.delete_namespaced_stateful_set, "StatefulSet"),
            (self.core.delete_namespaced_service, "Service"),
            (k8s.PolicyV1Api(self.admin).delete_namespaced_pod_disruption_budget, "budget"),
            (self.core.delete_namespaced_secret, "Secret"),
        ):
            name = SECRET if kind == "Secret" else NAME
            try:
                call(name, BOT_NAMESPACE)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        deadline = time.monotonic() + GONE_S
        while self.pods():
            for pod in self.pods():
                if pod.metadata.deletion_timestamp is None:
                    self.delete(pod.metadata.name, grace_s=0)
            if time.monotonic() > deadline:
                raise AssertionError(f"bot Pods left: {[p.metadata.name for p in self.pods()]}")
            await asyncio.sleep(0.5)
        while sandboxes := self.sandboxes():
            for name in sandboxes:
                try:
                    self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            if time.monotonic() > deadline:
                raise AssertionError(f"sandbox Pods left: {sandboxes}")
            await asyncio.sleep(0.5)

    def sandboxes(self) -> list[str]:
        """The sandbox Pods of these replicas (their labels begin with the instance)."""
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{SANDBOX_LABEL}=1").items
        return [
            p.metadata.name
            for p in pods
            if (p.metadata.labels or {}).get(INSTANCE_LABEL, "").startswith(self.instance + "-")
        ]
