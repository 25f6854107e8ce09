"""The blocking `kubernetes` client, as the backend uses it: the cluster's credentials, attach
and exec streams read frame by frame, and calls run in threads with their errors translated."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream as k8s_stream
from urllib3.exceptions import HTTPError
from websocket import ABNF

from executor.backoff import Backoff
from executor.errors import EngineUnavailable, SandboxError
from executor.kubernetes_pod import KubernetesSettings
from executor.stdio import STDOUT

T = TypeVar("T")
STREAM_LOCK = threading.Lock()


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


def frames(stream: Any) -> Iterator[tuple[int, bytes]]:
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


def stdout_chunks(running: Any) -> Iterator[bytes]:
    for channel, data in frames(running):
        if channel == STDOUT:
            yield data


def abort(stream: Any) -> None:
    """End an attach or exec stream's connection at once, waking a thread that reads it,
    without freeing its descriptor: another connection could get the same number while
    that thread still reads from it. (A polite websocket close waits for the far end.)"""
    websocket = getattr(stream, "sock", None)
    raw = getattr(websocket, "sock", None)
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)


def close_stream(stream: Any) -> None:
    """Abort a stream and free its connection; only for a stream no other thread reads."""
    abort(stream)
    websocket = getattr(stream, "sock", None)
    if websocket is not None:
        with contextlib.suppress(Exception):
            websocket.shutdown()


def delete_pod(api: k8s.CoreV1Api, namespace: str, name: str) -> None:
    with contextlib.suppress(ApiException):
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


async def cluster_call(call: Callable[..., T], *args: Any) -> T:
    """Run a blocking API call in a thread; a cluster that does not answer becomes
    EngineUnavailable, and a refusal a SandboxError, with what happened."""
    try:
        return await asyncio.to_thread(call, *args)
    except ApiException as exc:
        raise SandboxError(f"the cluster refused: {exc.status} {exc.reason}") from exc
    except HTTPError as exc:
        raise EngineUnavailable(f"The Kubernetes API does not answer: {exc}") from exc


CONFLICT_RETRY = Backoff(attempts=5, first_s=0.2)
"""A create the API server answers with 409 while the namespace's ResourceQuota is updated
by another create at the same moment (its usage is written with an optimistic lock)."""


async def create_call(call: Callable[..., T], *args: Any) -> T:
    """`cluster_call` for a create of a uniquely named object: a 409 Conflict can only be the
    quota's lock, so it is tried again after a short wait."""
    for wait in CONFLICT_RETRY.waits():
        await asyncio.sleep(wait)
        try:
            return await asyncio.to_thread(call, *args)
        except ApiException as exc:
            if exc.status != 409:
                raise SandboxError(f"the cluster refused: {exc.status} {exc.reason}") from exc
            conflict = exc
        except HTTPError as exc:
            raise EngineUnavailable(f"The Kubernetes API does not answer: {exc}") from exc
    raise SandboxError(f"the cluster refused: {conflict.status} {conflict.reason}") from conflict
