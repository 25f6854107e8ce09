"""The sandbox backend a deployment chose, built in one place: containers on the Docker
engine (the default), Pods on a Kubernetes cluster, or the fake backend that plays the
runner protocol in-process (no engine at all).

Settings hold only the backend's name and each backend's own settings; the bot's services,
`cellmate exec`, `cellmate doctor` and a bare `Executor` all build their backend here.
"""

from __future__ import annotations

import typing
from typing import Literal, overload

from executor.docker_backend import DockerBackend
from executor.fake_backend import FakeBackend
from executor.kubernetes_backend import KubernetesBackend, KubernetesSettings
from executor.protocol import SandboxBackend

BackendName = Literal["docker", "kubernetes", "fake"]
BACKENDS: tuple[BackendName, ...] = typing.get_args(BackendName)


@overload
def build_backend(
    name: Literal["docker"],
    image: str,
    *,
    instance: str = ...,
    kubernetes: KubernetesSettings | None = ...,
    session_secret: str = ...,
) -> DockerBackend: ...
@overload
def build_backend(
    name: Literal["kubernetes"],
    image: str,
    *,
    instance: str = ...,
    kubernetes: KubernetesSettings | None = ...,
    session_secret: str = ...,
) -> KubernetesBackend: ...
@overload
def build_backend(
    name: Literal["fake"],
    image: str,
    *,
    instance: str = ...,
    kubernetes: KubernetesSettings | None = ...,
    session_secret: str = ...,
) -> FakeBackend: ...
@overload
def build_backend(
    name: BackendName,
    image: str,
    *,
    instance: str = ...,
    kubernetes: KubernetesSettings | None = ...,
    session_secret: str = ...,
) -> SandboxBackend: ...
def build_backend(
    name: BackendName,
    image: str,
    *,
    instance: str = "default",
    kubernetes: KubernetesSettings | None = None,
    session_secret: str = "",
) -> SandboxBackend:
    """The backend called `name`, starting sandboxes from `image` labelled with `instance`
    (so that a start-up clean-up spares other instances' sandboxes). With `session_secret`,
    Docker sandboxes keep their sessions across restarts (Kubernetes has its own setting)."""
    if name == "kubernetes":
        return KubernetesBackend(image, kubernetes, instance=instance)
    if name == "fake":
        return FakeBackend()
    return DockerBackend(image, instance=instance, session_secret=session_secret)
