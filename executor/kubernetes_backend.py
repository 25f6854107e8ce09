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

It is one module past 400 lines because it is one concept, a sandbox Pod's life as the
executor sees it (start, attach, files, exit, recovery); what a Pod is lives in
kubernetes_pod.py, the blocking client's calls in kubernetes_api.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import logging
import os
import tarfile
import threading
import time
import uuid
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from executor.archive import ChunkReader, ExtractedFiles, OutputCaps, read_output_tar
from executor.errors import SandboxError
from executor.kubernetes_api import (
    abort,
    close_stream,
    cluster_call,
    connect,
    create_call,
    delete_pod,
    frames,
    open_stream,
    stdout_chunks,
)
from executor.kubernetes_pod import (
    CONTAINER,
    DATA_DIR,
    START_POLL_S,
    KubernetesSettings,
    exit_state,
    pod_manifest,
    wait_running,
)
from executor.kubernetes_stream import JUNK_BUDGET_BYTES, FrameQueue, Pump
from executor.limits import SandboxLimits
from executor.protocol import ExitState, Recovered, Sandbox
from executor.runner_client import claimed_session
from executor.stdio import STDERR, STDOUT, RunnerStream

log = logging.getLogger(__name__)

PUT_ATTEMPTS = 2
T = TypeVar("T")

SANDBOX_LABEL = "cellmate.sandbox"
INSTANCE_LABEL = "cellmate.instance"
EXIT_REPORT_S = 10.0
EXEC_SILENCE_S = 120.0
RESUME_ANSWER_S = 15.0
"""How long a runner attached again may take to answer `resume`, or to end a run that a
lost process had started."""
NEEDED = (
    ("pods", "", "create"),
    ("pods", "", "get"),
    ("pods", "", "list"),
    ("pods", "", "delete"),
    ("pods", "attach", "create"),
    ("pods", "exec", "create"),
)
"""What the executor does with Pods in its namespace (resource, subresource, verb)."""


EMPTY_STREAM_TRIES = 3
"""How often a read of the sandbox's files is tried when its stream brings nothing."""


class KubernetesSandbox:
    def __init__(
        self,
        api: k8s.CoreV1Api,
        streams: k8s.CoreV1Api,
        namespace: str,
        name: str,
        attach: Any,
        key: bytes,
        address: str | None = None,
    ) -> None:
        self._address = address
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
            functools.partial(frames, attach), key, self._frames, asyncio.get_running_loop()
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
                    delete_pod(self._api, self._namespace, self._name)
        finally:
            close_stream(self._attach)  # the reader frees the connection: see `abort`

    @property
    def id(self) -> str:
        return self._name

    @property
    def address(self) -> str | None:
        """The Pod's address (the egress proxy sees its requests come from it)."""
        return self._address

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
        await self._write(self._events.hello_line())

    async def resume(self) -> Recovered | None:
        """Ask a runner this process did not start whose session it holds (see
        `claimed_session`)."""
        return await claimed_session(self, RESUME_ANSWER_S)

    def detach(self) -> None:
        """Stop reading the runner without stopping the Pod."""
        self._frames.close()
        abort(self._attach)

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
            for _ in range(PUT_ATTEMPTS):
                out, err = self._exec(command, encoded)
                if out.strip() == b"done":
                    return
                if err.strip():
                    break
                # Neither "done" nor a complaint: the exec stream ended early (an API server
                # under load). Extracting the same files again is harmless: try once more.
            raise SandboxError(
                f"could not put files into the sandbox: {err.decode(errors='replace')[:300]}"
                if err.strip()
                else "could not put files into the sandbox: the cluster's exec stream ended "
                "before the files were written"
            )

        await cluster_call(put)

    async def get_files(
        self,
        caps: OutputCaps,
        unchanged: Mapping[str, bytes] | None = None,
        wanted: Collection[str] | None = None,
    ) -> ExtractedFiles:
        # `tar` archives links as links (they are refused when read) and runs as the
        # sandbox's user: it reads nothing that code in the sandbox could not.
        command = ["tar", "-c", "-f", "-", "-C", "/mnt", "data"]

        def fetch_once() -> ExtractedFiles:
            try:
                running = self._open_exec(command, stdin=False)
            except ApiException as exc:
                # The Pod is gone, or its container ended (gVisor ends the whole sandbox on
                # a memory kill): nothing can be read from it any more.
                if exc.status == 404 or "container not found" in str(exc.reason):
                    return ExtractedFiles()
                raise
            try:
                return read_output_tar(ChunkReader(stdout_chunks(running)), caps, unchanged, wanted)
            except (tarfile.TarError, EOFError) as exc:  # the stream ended early
                raise SandboxError(f"could not read the sandbox's files: {exc}") from exc
            finally:
                close_stream(running)

        def fetch() -> ExtractedFiles:
            # A loaded cluster may end an exec stream before its first byte: reading is
            # harmless to repeat, so a stream that brought nothing at all is opened again.
            for _ in range(EMPTY_STREAM_TRIES - 1):
                try:
                    return fetch_once()
                except SandboxError as exc:
                    if "empty file" not in str(exc):
                        raise
            return fetch_once()

        return await cluster_call(fetch)

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
            for channel, chunk in frames(running):
                if channel == STDOUT:
                    out += chunk
                elif channel == STDERR:
                    err += chunk
        finally:
            close_stream(running)
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
                state = exit_state(pod)
                if state.running is False or not ended or time.monotonic() > deadline:
                    return state
                time.sleep(START_POLL_S)

        return await cluster_call(inspect)

    async def kill(self) -> None:
        # Every process of the sandbox's user but the runner (an init, which nothing inside
        # can kill) ends at once; the Pod, and with it /mnt/data, stays readable. If that
        # cannot be done, the Pod goes.
        def kill() -> None:
            try:
                self._exec(["sh", "-c", "kill -KILL -1"])
            except Exception:
                log.warning("could not end the sandbox's processes; deleting its Pod")
                delete_pod(self._api, self._namespace, self._name)

        await cluster_call(kill)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._frames.close()
        abort(self._attach)
        await cluster_call(delete_pod, self._api, self._namespace, self._name)
        self._destroyed = True


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

        lacking = await cluster_call(missing)
        if lacking:
            raise SandboxError(
                f"This identity may not {', '.join(lacking)} in namespace {self.namespace!r} "
                "(deploy/kubernetes/rbac.yaml grants what sandboxes need)."
            )

    async def namespace_label(self, name: str) -> str:
        """A label of the sandbox namespace ('' when unset); the bot's Role may not read
        namespaces (they are cluster-wide), which raises SandboxError."""
        api = await self.api()
        found: Any = await cluster_call(api.read_namespace, self.namespace)
        return str((found.metadata.labels or {}).get(name, ""))

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> KubernetesSandbox:
        api = await self.api()
        name = f"cellmate-{uuid.uuid4().hex[:16]}"
        manifest = pod_manifest(self.image, name, limits, self.labels, self.settings)
        try:
            await create_call(api.create_namespaced_pod, self.namespace, manifest)
        except SandboxError as exc:
            raise SandboxError(f"the cluster refused to create a sandbox Pod: {exc}") from exc
        sandbox: KubernetesSandbox | None = None
        try:
            address = await cluster_call(
                wait_running,
                api,
                self.namespace,
                name,
                self.image,
                self.settings,
                limits.startup_timeout_s,
            )
            attach = await cluster_call(self._attach, name)
            sandbox = KubernetesSandbox(
                api, self.streams(), self.namespace, name, attach, self.key_for(name), address
            )
            await sandbox.hello()
            if input_tar:
                await sandbox.put_files(input_tar)
        except BaseException:
            if sandbox is not None:
                sandbox.detach()
            await asyncio.shield(asyncio.to_thread(delete_pod, api, self.namespace, name))
            raise
        return sandbox

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
        found: Any = await cluster_call(
            functools.partial(api.list_namespaced_pod, self.namespace, label_selector=selector)
        )
        return list(found.items)

    async def remove_leftovers(self, keep: Collection[str] = ()) -> int:
        api = await self.api()
        names = [pod.metadata.name for pod in await self._pods()]
        gone = [name for name in names if name not in keep]
        for name in gone:
            await cluster_call(delete_pod, api, self.namespace, name)
        return len(gone)

    async def recover(self, skip: Collection[str] = ()) -> list[Recovered]:
        running = {
            p.metadata.name: p.status.pod_ip
            for p in await self._pods()
            if p.status.phase == "Running" and p.metadata.name not in skip
        }
        found = await asyncio.gather(*(self._resumed(n, ip) for n, ip in running.items()))
        return [item for item in found if item is not None]

    async def adopt(self, sandbox_id: str) -> Recovered | None:
        api = await self.api()
        try:
            pod: Any = await cluster_call(api.read_namespaced_pod, sandbox_id, self.namespace)
        except (SandboxError, ApiException):
            return None  # gone (deleted, or its deadline passed)
        labels = pod.metadata.labels or {}
        if labels.get(SANDBOX_LABEL) != "1" or pod.status.phase != "Running":
            return None
        return await self._resumed(sandbox_id, pod.status.pod_ip)

    async def _resumed(self, name: str, address: str | None) -> Recovered | None:
        """Attach to the Pod `name` and ask its runner whose session it holds (None: no
        answer under its key, or no session; the Pod is let go, not deleted)."""
        api = await self.api()
        try:
            attach = await cluster_call(self._attach, name)
        except SandboxError:
            return None
        sandbox = KubernetesSandbox(
            api, self.streams(), self.namespace, name, attach, self.key_for(name), address or None
        )
        found = await sandbox.resume()
        if found is None:
            sandbox.detach()
        return found

    async def detach(self, sandbox: Sandbox) -> None:
        if isinstance(sandbox, KubernetesSandbox):
            sandbox.detach()

    async def close(self) -> None:
        for client in (self._client, self._stream_client):
            if client is not None:
                await asyncio.to_thread(client.close)
        self._client = self._stream_client = None


# The Pod's settings and manifest live in kubernetes_pod; callers take them from here too.
__all__ = [
    "INSTANCE_LABEL",
    "SANDBOX_LABEL",
    "KubernetesBackend",
    "KubernetesSandbox",
    "KubernetesSettings",
    "pod_manifest",
]
