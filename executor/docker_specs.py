"""What a sandbox asks the Docker engine for, in one place: its labels, its tmpfs data
volume and its hardened container (`sandbox_specs`), and the checks that the volume the
container got is that one (a volume swept away before its container was made comes back
plain, on the engine's disk, without a size cap).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors
from docker.types import DriverConfig, LogConfig, Mount, Ulimit

from executor.egress import PACKAGES_DIR, NetworkInfo, engine_runtime, sandbox_environment
from executor.errors import SandboxError
from executor.limits import SandboxLimits
from executor.seccomp import profile_json

log = logging.getLogger(__name__)

SANDBOX_LABEL = "cellmate.sandbox"
INSTANCE_LABEL = "cellmate.instance"
DATA_DIR = "/mnt/data"
NAME_PATTERN = re.compile(r"cellmate-[0-9a-f]{16}")
"""The name of every sandbox container and of its data volume."""


class VolumeReplaced(SandboxError):
    """The container was made on a volume that is not the sandbox's own tmpfs volume."""


def check_volume(client: docker.DockerClient, expected: Mapping[str, Any]) -> None:
    """Raise VolumeReplaced unless the volume named `expected["name"]` is the one asked for:
    its driver, options and labels. A volume that went (a sweep) before the container that
    mounts it was made is made again by the engine, plain, on its own disk, without a size
    cap; once the container exists it holds the volume, so what is checked here stays."""
    name = expected["name"]
    try:
        found = client.api.inspect_volume(name)
    except docker.errors.NotFound:
        found = {}
    labels = found.get("Labels") or {}
    if (
        found.get("Driver") != expected["driver"]
        or (found.get("Options") or {}) != expected["driver_opts"]
        or any(labels.get(k) != v for k, v in expected["labels"].items())
    ):
        raise VolumeReplaced(
            f"the sandbox volume {name} was removed before its container was made, and the "
            "engine put a plain volume in its place"
        )


def remove_plain_volumes(client: docker.DockerClient) -> int:
    """Remove volumes named like a sandbox's that no sandbox asked for: no labels, no
    options, in use by no container. The engine makes one when a sandbox's own volume went
    before its container was made; it outlives that container and keeps its files on the
    engine's disk. Labelled volumes, other names and volumes in use are never touched."""
    removed = 0
    try:
        listed = client.api.volumes(filters={"dangling": True}).get("Volumes") or []
    except docker.errors.APIError as exc:
        log.warning("could not list volumes to remove plain sandbox volumes: %s", exc)
        return 0
    for volume in listed:
        if (
            NAME_PATTERN.fullmatch(str(volume.get("Name")))
            and not volume.get("Labels")
            and not volume.get("Options")
            and volume.get("Driver") == "local"
        ):
            try:
                # Without force: a volume that a container took since the listing stays.
                client.api.remove_volume(volume["Name"])
            except docker.errors.APIError:
                continue
            removed += 1
    if removed:
        log.warning("removed %d plain volume(s) named like sandbox volumes", removed)
    return removed


def sandbox_specs(
    image: str,
    name: str,
    limits: SandboxLimits,
    labels: Mapping[str, str],
    network: NetworkInfo | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The arguments of `volumes.create` and `containers.create` for one sandbox: everything
    the engine is asked for, in one place (the Docker API proxy's tests start from these).
    `network`: the instance's sandbox network, which allowlist mode needs (egress.py)."""
    if (limits.egress == "allowlist") != (network is not None):
        raise ValueError("a sandbox network is given exactly when the network mode is allowlist")
    volume: dict[str, Any] = {
        "name": name,
        "driver": "local",
        "driver_opts": {
            "type": "tmpfs",
            "device": "tmpfs",
            "o": (
                f"size={limits.data_mb}m,uid={limits.uid},gid={limits.gid},mode=0700,nosuid,nodev"
            ),
        },
        "labels": dict(labels),
    }
    threads = str(max(1, int(limits.cpus)))
    container: dict[str, Any] = {
        "image": image,
        "name": name,
        "hostname": "sandbox",
        "labels": dict(labels),
        "user": f"{limits.uid}:{limits.gid}",
        "working_dir": DATA_DIR,
        "stdin_open": True,
        # Detached, the engine keeps the runner's stdin open when this process's attachment
        # ends (no StdinOnce): with a session secret, the next process attaches again.
        "detach": True,
        "tty": False,
        # The runner is the sandbox's init: an init of its own would hold the event stream's
        # descriptors where the user's code, running as the same user, could write to them.
        "init": False,
        "runtime": engine_runtime(limits.runtime, limits.egress),
        # Only these variables exist inside; nothing of the bot's environment.
        "environment": {
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "CELLMATE_PRELOAD": ",".join(limits.preloaded()),
            # The host brings the key in the first line on stdin (see stdio.py).
            "CELLMATE_RUNNER_AWAIT_HELLO": "1",
        },
        "network_mode": _network_mode(limits, network),
        "read_only": True,
        # Scratch space inside the container only; never a host path.
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmp_mb}m,mode=1777"},  # noqa: S108
        # The volume's own driver, options and labels again: should it be gone by the time
        # the container is made, the engine makes the same labelled tmpfs volume instead of
        # a plain one on its own disk (a volume that exists is used as it is).
        "mounts": [
            Mount(
                target=DATA_DIR,
                source=name,
                type="volume",
                labels=dict(labels),
                driver_config=DriverConfig(volume["driver"], volume["driver_opts"]),
            )
        ],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges", "seccomp=" + profile_json()],
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids,
        "ulimits": [
            Ulimit(
                name="fsize",
                soft=limits.file_size_mb * 1024 * 1024,
                hard=limits.file_size_mb * 1024 * 1024,
            ),
            Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
            Ulimit(name="core", soft=0, hard=0),
        ],
        # The sandbox's stdout is the protocol stream, with users' data: nothing keeps it.
        "log_config": LogConfig(type="none"),
        "shm_size": "64m",
        "ipc_mode": "private",
        # Under memory pressure on the host, sandboxes go before the bot or the engine.
        "oom_score_adj": 500,
    }
    if network is not None:
        container["environment"].update(
            sandbox_environment(
                (network.gateway, limits.proxy_port), limits.pip_index_url, limits.trusted_ca
            )
        )
        # Packages pip installs: exec-allowed (compiled extensions load from here), owned by
        # the sandbox user, capped in size, gone with the container.
        container["tmpfs"][PACKAGES_DIR] = (
            f"rw,nosuid,nodev,exec,size={limits.packages_mb}m,"
            f"uid={limits.uid},gid={limits.gid},mode=0755"
        )
    return volume, container


def _network_mode(limits: SandboxLimits, network: NetworkInfo | None) -> str:
    if network is not None:
        return network.name
    return "bridge" if limits.network else "none"
