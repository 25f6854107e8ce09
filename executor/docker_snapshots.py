"""Memory snapshots of gVisor sandboxes, through the Docker engine's checkpoint API.

A paused sandbox is its own container, stopped by `docker checkpoint create` (the engine
keeps the checkpoint in the container's folder; the container holds no memory), and
resumed by `docker start --checkpoint` into the same container: the engine stays the owner
of everything. What the engine does not allow decides the shape:

- `docker start --checkpoint-dir` answers "custom checkpointdir is not supported", so a
  checkpoint can only come back from the container's own folder: a snapshot stays on the
  engine that took it, and is restored into the container it was taken from.
- The data folder is a tmpfs volume, which holds files only while it is mounted: its files
  are saved with the workspace before the checkpoint, and put back after the restore.
- Right after a checkpoint, a restore is refused with "content ... already exists" until
  containerd's garbage collection has dropped the checkpoint's copy in its content store
  (a fraction of a second): that refusal is tried again.

A restored runner still holds the key it had: it must answer the `resume` sealed with that
key (a snapshot of another sandbox cannot), say that it holds the session asking, and take
a fresh key (`rekey`) before anything else is sent to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import docker
import docker.errors

from executor.backoff import Backoff
from executor.docker_sandbox import DockerSandbox, remove_sandbox
from executor.errors import SandboxError, SnapshotFailed
from executor.limits import SandboxLimits
from executor.protocol import PausedSandbox
from executor.runner_client import RunnerClient

log = logging.getLogger(__name__)

BACKEND = "docker"
CHECKPOINT = "cellmate-paused"
RESTORE_RETRY = Backoff(attempts=40, first_s=0.05, factor=1.5, max_s=0.5)
"""A restore refused while containerd still holds the checkpoint's copy (about 15 s in all)."""
HANDSHAKE_TIMEOUT_S = 30.0
"""A restored runner answers within moments, and re-seeding wakes its kernel; on a loaded
host either may take seconds. One that cannot open the host's lines never answers."""
MB = 1024 * 1024


def pause_refusal(info: Mapping[str, Any], limits: SandboxLimits) -> str | None:
    """Why sandboxes with `limits` cannot be paused on the engine that `info` describes."""
    if limits.runtime != "runsc":
        return "sandboxes run under runc, which cannot take memory snapshots (gVisor's runsc can)"
    if limits.egress == "allowlist" or limits.network:
        return "sandboxes with network access are not paused (their connections cannot be kept)"
    if not info.get("ExperimentalBuild"):
        return (
            "the Docker engine offers no checkpoints here (an experimental feature: set "
            '"experimental": true in /etc/docker/daemon.json and restart the engine; the '
            "Docker API proxy passes none)"
        )
    return None


def memory_mb(client: docker.DockerClient, container_id: str) -> float | None:
    """The sandbox's memory as the engine counts it (None when the runtime reports none)."""
    try:
        stats = client.api.stats(container_id, stream=False, one_shot=True)
    except docker.errors.APIError:
        return None
    usage = (stats.get("memory_stats") or {}).get("usage")
    return usage / MB if isinstance(usage, int | float) and usage > 0 else None


def checkpoint(client: docker.DockerClient, sandbox: DockerSandbox, max_mb: int) -> PausedSandbox:
    """Stop the sandbox into a checkpoint in its container's folder (blocking)."""
    used = memory_mb(client, sandbox.id)
    if used is not None and used > max_mb:
        raise SnapshotFailed(
            f"its memory ({used:.0f} MB) is more than a snapshot may hold ({max_mb} MB)"
        )
    paused_at = time.time()
    create_checkpoint(client, sandbox.id, CHECKPOINT, stop=True)
    _until_stopped(client, sandbox.id)
    return PausedSandbox(
        backend=BACKEND,
        sandbox=sandbox.name,
        checkpoint=CHECKPOINT,
        key=sandbox.key.hex(),
        paused_at=paused_at,
    )


def create_checkpoint(
    client: docker.DockerClient,
    container: str,
    checkpoint_id: str,
    *,
    stop: bool,
    folder: str | None = None,
) -> None:
    """`docker checkpoint create` (blocking): the container stopped (`stop`) or left running,
    the checkpoint in its own folder or in `folder` (another container's, for a clone)."""
    body: dict[str, Any] = {"CheckpointID": checkpoint_id, "Exit": stop}
    if folder is not None:
        body["CheckpointDir"] = folder
    response = raw_api(client)._post_json(  # docker-py has no call for checkpoints
        raw_api(client)._url("/containers/{0}/checkpoints", container), data=body
    )
    if response.status_code >= 400:
        raise SnapshotFailed(f"the engine could not checkpoint it: {said(response)}")


STOP_WAIT = Backoff(attempts=60, first_s=0.05, factor=1.2, max_s=0.5)
"""How long the engine may take to see a checkpointed container as stopped (it learns of the
exit from containerd's events after the checkpoint call has returned)."""


def _until_stopped(client: docker.DockerClient, container_id: str) -> None:
    for wait in STOP_WAIT.waits():
        if wait:
            time.sleep(wait)
        try:
            state = client.api.inspect_container(container_id).get("State", {})
        except docker.errors.NotFound:
            raise SnapshotFailed("its sandbox went away while it was checkpointed") from None
        if not state.get("Running"):
            return
    raise SnapshotFailed("the engine still shows it running after its checkpoint")


def start_from_checkpoint(client: docker.DockerClient, name: str, checkpoint_id: str) -> None:
    """`docker start --checkpoint` (blocking), tried again while containerd still holds the
    checkpoint's earlier copy."""
    refusal = ""
    for wait in RESTORE_RETRY.waits():
        if wait:
            time.sleep(wait)
        response = raw_api(client)._post(
            raw_api(client)._url("/containers/{0}/start", name),
            params={"checkpoint": checkpoint_id},
        )
        if response.status_code < 400:
            return
        refusal = said(response)
        if "already exists" not in refusal:
            break
    raise SnapshotFailed(f"the engine could not restore it: {refusal}")


def remove_checkpoint(client: docker.DockerClient, name: str, checkpoint_id: str) -> None:
    """Remove a checkpoint that was restored: it is never restored twice."""
    with contextlib.suppress(docker.errors.APIError):
        raw_api(client)._delete(
            raw_api(client)._url("/containers/{0}/checkpoints/{1}", name, checkpoint_id)
        )


def paused_state(
    client: docker.DockerClient, name: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The stopped container of a paused sandbox, checked: SnapshotFailed when it is gone,
    is not this instance's sandbox, or is running."""
    try:
        attrs: dict[str, Any] = client.api.inspect_container(name)
    except docker.errors.NotFound:
        raise SnapshotFailed("its sandbox is gone (removed, or the engine was reset)") from None
    found = attrs.get("Config", {}).get("Labels") or {}
    if any(found.get(k) != v for k, v in labels.items()):
        raise SnapshotFailed("its sandbox is not one of this installation's")
    if attrs.get("State", {}).get("Running"):
        raise SnapshotFailed("its sandbox is running, not paused")
    return attrs


def checkpoints(client: docker.DockerClient, container_id: str) -> list[str]:
    response = raw_api(client)._get(
        raw_api(client)._url("/containers/{0}/checkpoints", container_id)
    )
    if response.status_code >= 400:
        return []
    found = response.json() or []
    return [str(item.get("Name")) for item in found if isinstance(item, dict)]


def kept_paused(
    client: docker.DockerClient, summary: Mapping[str, Any], retention_s: float
) -> bool:
    """Whether a listed container is a paused sandbox to keep: stopped, holding the
    checkpoint, and paused less than `retention_s` ago."""
    if summary.get("State") == "running" or CHECKPOINT not in checkpoints(client, summary["Id"]):
        return False
    try:
        finished = client.api.inspect_container(summary["Id"])["State"]["FinishedAt"]
    except (docker.errors.APIError, KeyError):
        return False
    return _age_s(str(finished)) < retention_s


def _age_s(stamp: str) -> float:
    try:
        when = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00")
    except ValueError:
        return float("inf")
    return time.time() - when.timestamp()


async def handshake(
    sandbox: DockerSandbox, session: str, reseed: bool = False, new_key: bytes | None = None
) -> None:
    """Prove a restored runner is the snapshot's (it answers under the snapshot's key), that
    it holds `session`, and give it a fresh key (`new_key`: the one derived for its
    container, which a next process can derive again; and, with `reseed`, fresh random
    generators); SnapshotFailed otherwise."""
    client = RunnerClient(sandbox, timeout_s=HANDSHAKE_TIMEOUT_S)
    try:
        resumed = await client.resume()
    except TimeoutError:
        resumed = None
    if resumed is None:
        raise SnapshotFailed("the restored sandbox did not answer under its snapshot's key")
    if resumed.session != session:
        raise SnapshotFailed("the restored sandbox holds another conversation's session")
    try:
        rekeyed = await client.rekey(reseed, new_key)
    except TimeoutError:
        rekeyed = None
    if rekeyed is None:
        raise SnapshotFailed("the restored sandbox did not take a fresh key")


async def discard(client: docker.DockerClient, name: str) -> None:
    """Remove what is left of a paused sandbox (its container and data volume)."""
    try:
        await asyncio.to_thread(remove_sandbox, client, name, name)
    except (docker.errors.APIError, SandboxError) as exc:
        log.warning("could not remove paused sandbox %s: %s", name, exc)


def raw_api(client: docker.DockerClient) -> Any:
    """The engine's HTTP API as docker-py calls it, for the checkpoint calls it does not
    wrap."""
    return client.api


def said(response: Any) -> str:
    try:
        message = response.json().get("message")
    except ValueError:
        message = None
    return str(message or response.text or response.status_code)[:500]
