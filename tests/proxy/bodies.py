"""The executor's own request bodies, and an independent reading of what the engine would do
with a forwarded body: Go's JSON decoding (keys without case, the last duplicate wins), then
the security policy every sandbox must meet."""

from __future__ import annotations

import json
from typing import Any

import docker
from docker.models.containers import _create_container_args  # type: ignore[attr-defined]

from dockerproxy import Policy
from executor import SandboxLimits
from executor.docker_specs import INSTANCE_LABEL, SANDBOX_LABEL, sandbox_specs
from executor.egress import NetworkInfo
from executor.seccomp import profile_json

IMAGE = "cellmate-sandbox:0123456789ab"
INSTANCE = "proxy-tests"
LABELS = {SANDBOX_LABEL: "1", INSTANCE_LABEL: INSTANCE}
# Go folds these two non-ASCII letters onto ASCII ones when it matches keys to fields.
GO_FOLDS = str.maketrans({"\u212a": "k", "\u017f": "s"})


def executor_bodies(
    limits: SandboxLimits,
    name: str = "cellmate-0123456789abcdef",
    network: NetworkInfo | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON bodies docker-py sends for the executor's volume and container create."""
    volume, container = sandbox_specs(IMAGE, name, limits, LABELS, network)
    api = docker.APIClient(base_url="tcp://127.0.0.1:9", version="1.41")
    kwargs = {**container, "version": "1.41", "command": None}
    args = _create_container_args(kwargs)
    args.pop("name")
    body = api.create_container_config(**args)
    volume_body = {
        "Name": volume["name"],
        "Driver": volume["driver"],
        "DriverOpts": volume["driver_opts"],
        "Labels": volume["labels"],
    }
    return volume_body, json.loads(json.dumps(body))


def go_decode(raw: bytes) -> Any:
    """Objects as lists of pairs, read later the way encoding/json matches struct fields."""
    return json.loads(raw, object_pairs_hook=list)


def field(pairs: Any, name: str) -> Any:
    """A struct field as Go finds it: any case, the last duplicate wins."""
    found = None
    for key, value in pairs or []:
        if key.translate(GO_FOLDS).lower() == name.lower():
            found = value
    return found


def names(pairs: Any) -> set[str]:
    return {key.translate(GO_FOLDS).lower() for key, _ in pairs or []}


CONTAINER_FIELDS = {
    "image", "hostname", "user", "workingdir", "tty", "openstdin", "stdinonce", "attachstdin",
    "attachstdout", "attachstderr", "env", "labels", "networkdisabled", "hostconfig",
}  # fmt: skip
HOST_FIELDS = {
    "privileged", "readonlyrootfs", "capdrop", "securityopt", "memory", "memoryswap",
    "nanocpus", "pidslimit", "networkmode", "runtime", "ipcmode", "shmsize", "oomscoreadj",
    "init", "ulimits", "logconfig", "tmpfs", "mounts",
}  # fmt: skip


def assert_safe_container(raw: bytes, policy: Policy) -> None:
    """What the engine would make of `raw` meets the sandbox policy."""
    body = go_decode(raw)
    assert names(body) <= CONTAINER_FIELDS, names(body) - CONTAINER_FIELDS
    assert field(body, "User") == policy.user
    assert str(field(body, "Image")).startswith(f"{policy.image_repository}:")
    assert field(body, "Tty") is False
    for entry in field(body, "Env") or []:
        assert entry.split("=")[0].endswith("_NUM_THREADS") or entry.startswith("CELLMATE_")
    labels = dict(field(body, "Labels"))
    assert labels[SANDBOX_LABEL] == "1"
    assert labels[INSTANCE_LABEL] == policy.instance
    host = field(body, "HostConfig")
    assert names(host) <= HOST_FIELDS, names(host) - HOST_FIELDS
    assert field(host, "Privileged") is False
    assert field(host, "ReadonlyRootfs") is True
    assert field(host, "CapDrop") == ["ALL"]
    assert field(host, "SecurityOpt") == ["no-new-privileges", f"seccomp={profile_json()}"]
    assert dict(field(host, "LogConfig")) == {"Type": "none", "Config": []}
    memory = field(host, "Memory")
    assert 0 < memory <= policy.max_memory_mb * 2**20
    assert field(host, "MemorySwap") == memory
    assert 0 < field(host, "PidsLimit") <= policy.max_pids
    assert 0 < field(host, "NanoCpus") <= policy.max_cpus * 1e9
    assert field(host, "NetworkMode") in (("none", "bridge") if policy.allow_network else ("none",))
    assert field(host, "Runtime") in policy.runtimes
    assert field(host, "IpcMode") == "private"
    assert field(host, "OomScoreAdj") >= 0
    for target, options in dict(field(host, "Tmpfs")).items():
        assert target == "/tmp"
        assert {"noexec", "nosuid", "nodev"} <= set(options.split(","))
        assert "exec" not in options.split(",")
        assert "suid" not in options.split(",")
    mounts = field(host, "Mounts")
    assert len(mounts) == 1
    assert field(mounts[0], "Type") == "volume"
    assert field(mounts[0], "Target") == "/mnt/data"
    assert names(mounts[0]) == {"type", "source", "target", "readonly"}
    for limit in field(host, "Ulimits"):
        assert field(limit, "Name") in ("fsize", "nofile", "core")


def assert_safe_volume(raw: bytes, policy: Policy) -> None:
    body = go_decode(raw)
    assert names(body) == {"name", "driver", "driveropts", "labels"}
    assert field(body, "Driver") == "local"
    options = dict(field(body, "DriverOpts"))
    assert set(options) == {"type", "device", "o"}
    assert options["type"] == "tmpfs"
    assert options["device"] == "tmpfs"
    settings = options["o"].split(",")
    assert f"uid={policy.uid}" in settings
    assert f"gid={policy.gid}" in settings
    assert "nosuid" in settings
    assert "nodev" in settings
    assert not any(s in ("bind", "rbind") or s.startswith("device") for s in settings)
    assert dict(field(body, "Labels")) == {SANDBOX_LABEL: "1", INSTANCE_LABEL: policy.instance}
