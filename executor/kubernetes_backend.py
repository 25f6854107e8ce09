"""Sandboxes as Pods on a Kubernetes cluster, for teams that outgrow one Docker host.

The cluster places Pods and enforces their limits (requests and limits, a size-limited
`emptyDir` for /mnt/data and /tmp, the namespace's PodSecurity `restricted` level, its
NetworkPolicy, a RuntimeClass such as gVisor); this module only asks for them. The runner
speaks the same JSON lines as on Docker, over the Pod's attached stdin/stdout. An attach
sees only what is written after it, so the Pod tells the runner to wait for a first line
("hello") before its `ready`. Files move as tar streams through `exec` of `tar` inside the
sandbox, as the sandbox's own user: the archive that comes out is read within the same caps,
and with the same refusals (links, devices, paths out of /mnt/data), as on Docker.

The official `kubernetes` client is synchronous; its calls run in threads, and one thread
per sandbox pumps the attach stream into the event queue, which is bounded (see
executor/kubernetes_stream.py). Its `stream()` swaps the request
method of the client it is given while it connects, so streams use a client of their own,
one connection set-up at a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream as k8s_stream
from urllib3.exceptions import HTTPError
from websocket import ABNF

from executor.archive import ChunkReader, ExtractedFiles, OutputCaps, read_output_tar
from executor.errors import EngineUnavailable, ImageNotFound, SandboxError
from executor.kubernetes_seccomp import PROFILE_PATH
from executor.kubernetes_stream import JUNK_BUDGET_BYTES, FrameQueue, Pump
from executor.limits import SandboxLimits
from executor.protocol import ExitState, Recovered, Sandbox
from executor.stdio import STDERR, STDOUT, RunnerStream

log = logging.getLogger(__name__)
T = TypeVar("T")

SANDBOX_LABEL = "cellmate.sandbox"
INSTANCE_LABEL = "cellmate.instance"
CONTAINER = "sandbox"
DATA_DIR = "/mnt/data"
START_POLL_S = 0.1
EXIT_REPORT_S = 10.0
EXEC_SILENCE_S = 120.0
RESUME_ANSWER_S = 15.0
"""How long a runner attached again may take to answer `resume`, or to end a run that a
lost process had started."""
STREAM_LOCK = threading.Lock()
NEEDED = (
    ("pods", "", "create"),
    ("pods", "", "get"),
    ("pods", "", "list"),
    ("pods", "", "delete"),
    ("pods", "attach", "create"),
    ("pods", "exec", "create"),
)
"""What the executor does with Pods in its namespace (resource, subresource, verb)."""
TERMINATION_MESSAGE_PATH = "/root/termination-log"
"""Where the kubelet bind-mounts the container's termination message: a file on the node's
disk, mode 0666, which no size limit of the Pod covers. Inside /root (root's, mode 0700 in
the image, on a read-only root) the sandbox's user cannot reach it; at /dev/termination-log
any code could fill it up to the file size limit."""
IMAGE_FAILURES = {"ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName"}


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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels)},
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


def connect(settings: KubernetesSettings) -> k8s.Configuration:
    """The cluster's address and credentials (kubeconfig, or in-cluster), or
    EngineUnavailable."""
    try:
        if settings.kubeconfig:
            configuration = k8s.Configuration()
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig,
                context=settings.context or None,
                client_configuration=configuration,
            )
        else:
            configuration = k8s.Configuration()
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                    context=settings.context or None, client_configuration=configuration
                )
    except (k8s_config.ConfigException, OSError) as exc:
        raise EngineUnavailable(
            f"No Kubernetes cluster is configured ({exc}). Set CELLMATE_KUBERNETES_KUBECONFIG, "
            "or run the bot in the cluster with its service account."
        ) from exc
    return configuration


def open_stream(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An attach or exec stream (bytes both ways), opened under the stream lock."""
    with STREAM_LOCK:
        return k8s_stream(method, *args, binary=True, _preload_content=False, tty=False, **kwargs)


class KubernetesSandbox:
    def __init__(
        self,
        api: k8s.CoreV1Api,
        streams: k8s.CoreV1Api,
        namespace: str,
        name: str,
        attach: Any,
        key: bytes,
    ) -> None:
        self._api = api
        self._streams = streams
        self._namespace = namespace
        self._name = name
        self._attach = attach
        self._key = key
        self._frames = FrameQueue()
        self._events = RunnerStream(frames=self._frames, key=key)
        self._destroyed = False
        self._reader = Pump(
            functools.partial(_frames, attach), key, self._frames, asyncio.get_running_loop()
        )
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        try:
            self._reader.run()
            if self._reader.flooded:
                # The Pod goes before the connection: unread (a stream still attached and
                # not read holds the sandbox back), while a closed one would let the flood
                # go on into the container log on the node's disk until the Pod ends.
                log.warning(
                    "sandbox %s wrote more than %d MB outside its protocol; deleting its Pod",
                    self._name,
                    JUNK_BUDGET_BYTES // 2**20,
                )
                with contextlib.suppress(Exception):
                    _delete(self._api, self._namespace, self._name)
        finally:
            _close(self._attach)  # the reader frees the connection: see `_abort`

    @property
    def id(self) -> str:
        return self._name

    @property
    def alive(self) -> bool:
        # The pump ends with the attach stream: a Pod that went while nobody was reading
        # its events is not alive either.
        return self._pump.is_alive() and not self._events.ended

    @property
    def stderr_tail(self) -> str:
        if self._reader.flooded:
            return (
                f"The sandbox wrote more than {JUNK_BUDGET_BYTES // 2**20} MB outside its "
                "protocol (error stream, unsealed lines) and was stopped."
            )
        return self._reader.tail.text()

    @property
    def flooded(self) -> bool:
        """Whether the sandbox was cut off for writing too much outside its protocol."""
        return self._reader.flooded

    async def hello(self) -> None:
        """The runner's first line, with its key: written before any user code exists."""
        await self._write(json.dumps({"op": "hello", "key": self._key.hex()}).encode() + b"\n")

    async def resume(self) -> Recovered | None:
        """Ask a runner this process did not start whose session it holds; a run that a lost
        process started is interrupted and waited for. None: no answer, or no session."""
        nonce = uuid.uuid4().hex
        try:
            async with asyncio.timeout(RESUME_ANSWER_S):
                await self._write(self._events.resume_line(nonce))
                answer = await self.receive()
                while answer is not None and answer.get("type") == "warm":
                    answer = await self.receive()  # a runner still warming up says so first
                if answer is None or not answer.get("session"):
                    return None
                if answer.get("busy"):
                    await self.send({"op": "interrupt"})
                    while (event := await self.receive()) is not None:
                        if event.get("type") == "done":
                            break
                    else:
                        return None
        except (TimeoutError, SandboxError):
            return None
        return Recovered(sandbox=self, session=str(answer["session"]))

    def detach(self) -> None:
        """Stop reading the runner without stopping the Pod."""
        self._frames.close()
        _abort(self._attach)

    async def send(self, request: Mapping[str, Any]) -> None:
        await self._write(self._events.request_line(request))

    async def _write(self, line: bytes) -> None:
        try:
            await asyncio.to_thread(self._attach.write_stdin, line)
        except Exception as exc:  # the websocket library raises its own kinds
            raise SandboxError(f"the sandbox's input is closed: {exc}") from exc

    async def receive(self) -> dict[str, Any] | None:
        return await self._events.receive()

    async def put_files(self, tar: bytes) -> None:
        # The stream cannot half-close stdin (websocket protocol v4): the length goes first.
        encoded = base64.b64encode(tar)
        command = [
            "sh",
            "-c",
            f"head -c {len(encoded)} | base64 -d | tar -x -f - -C {DATA_DIR} "
            "--no-same-owner --no-same-permissions --no-overwrite-dir && echo done",
        ]

        def put() -> None:
            out, err = self._exec(command, encoded)
            if out.strip() != b"done":
                raise SandboxError(
                    f"could not put files into the sandbox: {err.decode(errors='replace')[:300]}"
                )

        await _cluster(put)

    async def get_files(
        self,
        caps: OutputCaps,
        unchanged: Mapping[str, bytes] | None = None,
        wanted: Collection[str] | None = None,
    ) -> ExtractedFiles:
        # `tar` archives links as links (they are refused when read) and runs as the
        # sandbox's user: it reads nothing that code in the sandbox could not.
        command = ["tar", "-c", "-f", "-", "-C", "/mnt", "data"]

        def fetch() -> ExtractedFiles:
            try:
                running = self._open_exec(command, stdin=False)
            except ApiException as exc:
                # The Pod is gone, or its container ended (gVisor ends the whole sandbox on
                # a memory kill): nothing can be read from it any more.
                if exc.status == 404 or "container not found" in str(exc.reason):
                    return ExtractedFiles()
                raise
            try:
                return read_output_tar(
                    ChunkReader(_stdout_chunks(running)), caps, unchanged, wanted
                )
            except (tarfile.TarError, EOFError) as exc:  # the stream ended early
                raise SandboxError(f"could not read the sandbox's files: {exc}") from exc
            finally:
                _close(running)

        return await _cluster(fetch)

    def _open_exec(self, command: list[str], stdin: bool) -> Any:
        running = open_stream(
            self._streams.connect_get_namespaced_pod_exec,
            self._name,
            self._namespace,
            container=CONTAINER,
            command=command,
            stdin=stdin,
            stdout=True,
            stderr=True,
        )
        # A command that stops answering (a lost connection, a stalled node) must not hold
        # the run forever: a read that waits this long ends the stream.
        running.sock.settimeout(EXEC_SILENCE_S)
        return running

    def _exec(self, command: list[str], data: bytes | None = None) -> tuple[bytes, bytes]:
        running = self._open_exec(command, stdin=data is not None)
        out, err = bytearray(), bytearray()
        try:
            if data is not None:
                running.write_stdin(data)
            for channel, chunk in _frames(running):
                if channel == STDOUT:
                    out += chunk
                elif channel == STDERR:
                    err += chunk
        finally:
            _close(running)
        return bytes(out), bytes(err)

    async def exit_state(self) -> ExitState:
        ended = not self.alive

        def inspect() -> ExitState:
            # The kubelet reports how the container ended a moment after its output ended.
            deadline = time.monotonic() + EXIT_REPORT_S
            while True:
                try:
                    pod: Any = self._api.read_namespaced_pod(self._name, self._namespace)
                except ApiException as exc:
                    if exc.status == 404:
                        return ExitState(running=False, exit_code=None, oom_killed=False)
                    raise
                state = _exit_state(pod)
                if state.running is False or not ended or time.monotonic() > deadline:
                    return state
                time.sleep(START_POLL_S)

        return await _cluster(inspect)

    async def kill(self) -> None:
        # Every process of the sandbox's user but the runner (an init, which nothing inside
        # can kill) ends at once; the Pod, and with it /mnt/data, stays readable. If that
        # cannot be done, the Pod goes.
        def kill() -> None:
            try:
                self._exec(["sh", "-c", "kill -KILL -1"])
            except Exception:
                log.warning("could not end the sandbox's processes; deleting its Pod")
                _delete(self._api, self._namespace, self._name)

        await _cluster(kill)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._frames.close()
        _abort(self._attach)
        await _cluster(_delete, self._api, self._namespace, self._name)
        self._destroyed = True


def _exit_state(pod: Any) -> ExitState:
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


def _frames(stream: Any) -> Iterator[tuple[int, bytes]]:
    """(channel, bytes) of an attach or exec stream as they arrive, until it closes.

    Read frame by frame from the websocket: the client's own buffering joins a channel's
    frames with `+=`, which is quadratic in the size of a large archive."""
    websocket = stream.sock
    while True:
        try:
            opcode, frame = websocket.recv_data_frame(True)
        except Exception:  # closed under us, or by the far end
            return
        if opcode == ABNF.OPCODE_CLOSE:
            return
        if opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) and len(frame.data) > 1:
            data = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
            yield data[0], data[1:]


def _stdout_chunks(running: Any) -> Iterator[bytes]:
    for channel, data in _frames(running):
        if channel == STDOUT:
            yield data


def _abort(stream: Any) -> None:
    """End an attach or exec stream's connection at once, waking a thread that reads it,
    without freeing its descriptor: another connection could get the same number while
    that thread still reads from it. (A polite websocket close waits for the far end.)"""
    websocket = getattr(stream, "sock", None)
    raw = getattr(websocket, "sock", None)
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)


def _close(stream: Any) -> None:
    """Abort a stream and free its connection; only for a stream no other thread reads."""
    _abort(stream)
    websocket = getattr(stream, "sock", None)
    if websocket is not None:
        with contextlib.suppress(Exception):
            websocket.shutdown()


def _delete(api: k8s.CoreV1Api, namespace: str, name: str) -> None:
    with contextlib.suppress(ApiException):
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


async def _cluster(call: Callable[..., T], *args: Any) -> T:
    """Run a blocking API call in a thread; a cluster that does not answer becomes
    EngineUnavailable, and a refusal a SandboxError, with what happened."""
    try:
        return await asyncio.to_thread(call, *args)
    except ApiException as exc:
        raise SandboxError(f"the cluster refused: {exc.status} {exc.reason}") from exc
    except HTTPError as exc:
        raise EngineUnavailable(f"The Kubernetes API does not answer: {exc}") from exc


class KubernetesBackend:
    """Starts sandboxes from `image` as Pods in `settings.namespace`."""

    def __init__(
        self, image: str, settings: KubernetesSettings | None = None, instance: str = "default"
    ) -> None:
        self.image = image
        self.settings = settings or KubernetesSettings()
        self.instance = instance
        self._client: k8s.ApiClient | None = None
        self._stream_client: k8s.ApiClient | None = None
        self._secret = self.settings.session_secret.encode() or os.urandom(32)

    @property
    def keeps_sessions(self) -> bool:
        return bool(self.settings.session_secret)

    def key_for(self, name: str) -> bytes:
        """The runner key of the Pod `name`: only a process with the secret can make it."""
        return hmac.new(self._secret, b"cellmate-sandbox " + name.encode(), hashlib.sha256).digest()

    @property
    def labels(self) -> dict[str, str]:
        return {SANDBOX_LABEL: "1", INSTANCE_LABEL: self.instance}

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    async def api(self) -> k8s.CoreV1Api:
        if self._client is None:
            configuration = await asyncio.to_thread(connect, self.settings)
            self._client = k8s.ApiClient(configuration)
            self._stream_client = k8s.ApiClient(configuration)
        return k8s.CoreV1Api(self._client)

    def streams(self) -> k8s.CoreV1Api:
        assert self._stream_client is not None
        return k8s.CoreV1Api(self._stream_client)

    async def check(self, runtime: str = "runc") -> None:
        """The cluster answers, and lets this identity do what sandboxes need in the
        namespace (asked with SelfSubjectAccessReview, which every identity may use)."""
        await self.api()
        assert self._client is not None
        reviews = k8s.AuthorizationV1Api(self._client)

        def missing() -> list[str]:
            lacking = []
            for resource, subresource, verb in NEEDED:
                attributes = k8s.V1ResourceAttributes(
                    namespace=self.namespace,
                    resource=resource,
                    subresource=subresource or None,
                    verb=verb,
                )
                review: Any = reviews.create_self_subject_access_review(
                    k8s.V1SelfSubjectAccessReview(
                        spec=k8s.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
                    )
                )
                if not review.status.allowed:
                    lacking.append(f"{verb} {resource}{'/' + subresource if subresource else ''}")
            return lacking

        lacking = await _cluster(missing)
        if lacking:
            raise SandboxError(
                f"This identity may not {', '.join(lacking)} in namespace {self.namespace!r} "
                "(deploy/kubernetes/rbac.yaml grants what sandboxes need)."
            )

    async def namespace_label(self, name: str) -> str:
        """A label of the sandbox namespace ('' when unset); the bot's Role may not read
        namespaces (they are cluster-wide), which raises SandboxError."""
        api = await self.api()
        found: Any = await _cluster(api.read_namespace, self.namespace)
        return str((found.metadata.labels or {}).get(name, ""))

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> KubernetesSandbox:
        api = await self.api()
        name = f"cellmate-{uuid.uuid4().hex[:16]}"
        manifest = pod_manifest(self.image, name, limits, self.labels, self.settings)
        try:
            await _cluster(api.create_namespaced_pod, self.namespace, manifest)
        except SandboxError as exc:
            raise SandboxError(f"the cluster refused to create a sandbox Pod: {exc}") from exc
        sandbox: KubernetesSandbox | None = None
        try:
            await _cluster(self._wait_running, api, name, limits.startup_timeout_s)
            attach = await _cluster(self._attach, name)
            sandbox = KubernetesSandbox(
                api, self.streams(), self.namespace, name, attach, self.key_for(name)
            )
            await sandbox.hello()
            if input_tar:
                await sandbox.put_files(input_tar)
        except BaseException:
            if sandbox is not None:
                sandbox.detach()
            await asyncio.shield(asyncio.to_thread(_delete, api, self.namespace, name))
            raise
        return sandbox

    def _wait_running(self, api: k8s.CoreV1Api, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            pod: Any = api.read_namespaced_pod(name, self.namespace)
            if pod.status.phase == "Running":
                return
            if pod.status.phase in ("Failed", "Succeeded"):
                raise SandboxError(f"the sandbox Pod ended before it ran ({pod.status.reason})")
            for status in pod.status.container_statuses or []:
                waiting = status.state.waiting if status.state is not None else None
                if waiting is not None and waiting.reason in IMAGE_FAILURES:
                    raise ImageNotFound(
                        f"The cluster cannot run the sandbox image {self.image} "
                        f"({waiting.reason}): load or push it where the nodes pull from."
                    )
                if waiting is not None and "seccomp" in (waiting.message or ""):
                    raise SandboxError(self._no_profile(pod, waiting.message))
            if time.monotonic() > deadline:
                raise SandboxError(f"the sandbox Pod was not running after {timeout_s:g} s")
            time.sleep(START_POLL_S)

    def _no_profile(self, pod: Any, message: str) -> str:
        node = pod.spec.node_name or "its node"
        return (
            f"The sandbox's seccomp profile {self.settings.seccomp_profile!r} is not installed "
            f"on {node} ({message[:200]}). Install it on every node that runs sandboxes "
            "(scripts/install-seccomp-profile.sh, into the kubelet's seccomp folder), or set "
            "CELLMATE_KUBERNETES_SECCOMP_PROFILE=RuntimeDefault to run runc sandboxes under "
            "the runtime's default profile, which allows io_uring."
        )

    def _attach(self, name: str) -> Any:
        return open_stream(
            self.streams().connect_get_namespaced_pod_attach,
            name,
            self.namespace,
            container=CONTAINER,
            stdin=True,
            stdout=True,
            stderr=True,
        )

    async def _pods(self) -> list[Any]:
        api = await self.api()
        selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
        found: Any = await _cluster(
            functools.partial(api.list_namespaced_pod, self.namespace, label_selector=selector)
        )
        return list(found.items)

    async def remove_leftovers(self, keep: Collection[str] = ()) -> int:
        api = await self.api()
        names = [pod.metadata.name for pod in await self._pods()]
        gone = [name for name in names if name not in keep]
        for name in gone:
            await _cluster(_delete, api, self.namespace, name)
        return len(gone)

    async def recover(self) -> list[Recovered]:
        api = await self.api()
        running = [p.metadata.name for p in await self._pods() if p.status.phase == "Running"]

        async def one(name: str) -> Recovered | None:
            try:
                attach = await _cluster(self._attach, name)
            except SandboxError:
                return None
            sandbox = KubernetesSandbox(
                api, self.streams(), self.namespace, name, attach, self.key_for(name)
            )
            found = await sandbox.resume()
            if found is None:
                sandbox.detach()
            return found

        found = await asyncio.gather(*(one(name) for name in running))
        return [item for item in found if item is not None]

    async def detach(self, sandbox: Sandbox) -> None:
        if isinstance(sandbox, KubernetesSandbox):
            sandbox.detach()

    async def close(self) -> None:
        for client in (self._client, self._stream_client):
            if client is not None:
                await asyncio.to_thread(client.close)
        self._client = self._stream_client = None
