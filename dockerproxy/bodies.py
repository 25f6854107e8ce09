"""The bodies the proxy sends to the engine, built from the allowed fields of the client's.

Nothing of a client's body is forwarded as it came: each builder reads the fields the executor
sends, checks each against the policy, and writes a new body whose security fields are the
proxy's own. A field it does not know, or a value outside the policy, is refused with a reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from dockerproxy import jsonbody as j
from dockerproxy import networks
from dockerproxy.errors import RequestRefused
from dockerproxy.policy import INSTANCE_LABEL, SANDBOX_LABEL, MiB, Policy
from executor.egress import NETWORK_RUNTIMES, PACKAGES_DIR
from executor.seccomp import profile_json

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
HOSTNAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
LABEL_KEY = re.compile(r"cellmate\.[a-z0-9_.-]{1,64}")
LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:@+=-]{0,128}")
ENV_NAME = re.compile(r"(?:OMP|OPENBLAS|MKL)_NUM_THREADS|CELLMATE_[A-Z0-9_]{1,64}")
ENV_VALUE = re.compile(r"[A-Za-z0-9_.:,=+-]{0,256}")
EGRESS_ENV_VALUE = re.compile(r"[A-Za-z0-9_.:,=+/~-]{0,512}")
"""Values of the egress variables (URLs, paths); each is compared with the proxy's own."""
SIZE = re.compile(r"(?P<number>[1-9][0-9]{0,9})(?P<unit>[kmg]?)")
DATA_DIR = "/mnt/data"
TMP_DIR = "/tmp"  # noqa: S108 (a tmpfs inside the container, never a host path)
UNITS = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB}


@dataclass(frozen=True, slots=True)
class ContainerBody:
    body: dict[str, Any]
    volume: str
    """The volume mounted at /mnt/data: the caller checks that it is a sandbox's."""
    network: str | None = None
    """The sandbox network the container asks to join: the caller checks it is the
    instance's (`networks.check_network`) and writes its variables (`egress_env`)."""
    egress_env: dict[str, str] | None = None


def container(struct: j.Struct, policy: Policy) -> ContainerBody:
    """The create body for POST /containers/create."""
    image = _image(struct.take("Image"), policy)
    user = struct.take("User")
    if user != policy.user:
        raise RequestRefused(f"containers must run as the sandbox user {policy.user}, not {user!r}")
    hostname = struct.take("Hostname")
    body: dict[str, Any] = {
        "Image": image,
        "Hostname": "sandbox" if hostname in (None, "") else j.text(hostname, "Hostname", HOSTNAME),
        "User": policy.user,
        "WorkingDir": DATA_DIR,
        "Tty": False,
        "OpenStdin": j.boolean(struct.take("OpenStdin"), "OpenStdin", False),
        "StdinOnce": j.boolean(struct.take("StdinOnce"), "StdinOnce", False),
        "AttachStdin": j.boolean(struct.take("AttachStdin"), "AttachStdin", False),
        "AttachStdout": j.boolean(struct.take("AttachStdout"), "AttachStdout", False),
        "AttachStderr": j.boolean(struct.take("AttachStderr"), "AttachStderr", False),
        "Env": [],
        "Labels": labels(struct.take("Labels"), "Labels", policy),
    }
    if j.boolean(struct.take("Tty"), "Tty", False):
        raise RequestRefused("Tty is not allowed (the runner speaks over plain stdin/stdout)")
    working_dir = struct.take("WorkingDir")
    if working_dir not in (None, "", DATA_DIR):
        raise RequestRefused(f"WorkingDir must be {DATA_DIR}")
    plain, egress_env = _environment(struct.take("Env"))
    body["Env"] = plain
    network_disabled = j.boolean(struct.take("NetworkDisabled"), "NetworkDisabled", False)
    # The image's own entry point (the runner) is the only program a sandbox starts with.
    for name in ("Cmd", "Entrypoint", "Domainname", "ExposedPorts", "Volumes", "MacAddress"):
        j.absent(struct.take(name), name)
    for name in ("StopSignal", "Healthcheck", "StopTimeout", "Runtime", "NetworkingConfig"):
        j.absent(struct.take(name), name)
    host, volume, joined = _host_config(j.struct(struct.take("HostConfig"), "HostConfig"), policy)
    struct.done()
    if joined is None and egress_env:
        raise RequestRefused(
            f"the variables {', '.join(sorted(egress_env))} are only for sandboxes on the "
            "sandbox network"
        )
    if joined is not None and network_disabled:
        raise RequestRefused("a sandbox on the sandbox network cannot have its network disabled")
    if network_disabled or host["NetworkMode"] == "none":
        body["NetworkDisabled"] = True
    body["HostConfig"] = host
    return ContainerBody(body, volume, joined, egress_env if joined is not None else None)


def _host_config(host: j.Struct, policy: Policy) -> tuple[dict[str, Any], str, str | None]:
    """The HostConfig the engine gets, the data volume, and the sandbox network asked for."""
    if j.boolean(host.take("Privileged"), "HostConfig.Privileged", False):
        raise RequestRefused("privileged containers are not allowed")
    if not j.boolean(host.take("ReadonlyRootfs"), "HostConfig.ReadonlyRootfs", False):
        raise RequestRefused("containers must have a read-only root file system")
    dropped = [c.upper() for c in j.strings(host.take("CapDrop"), "HostConfig.CapDrop")]
    if "ALL" not in dropped and "CAP_ALL" not in dropped:
        raise RequestRefused("containers must drop every capability (CapDrop ALL)")
    j.absent(host.take("CapAdd"), "HostConfig.CapAdd (adding capabilities)")
    _security_options(host.take("SecurityOpt"))
    memory = j.integer(
        host.take("Memory"), "HostConfig.Memory", 128 * MiB, policy.max_memory_mb * MiB
    )
    swap = host.take("MemorySwap")
    if swap != memory:
        raise RequestRefused("HostConfig.MemorySwap must equal HostConfig.Memory (no swap)")
    network = host.take("NetworkMode")
    joined: str | None = None
    if network in (None, "", "none"):
        network = "none"
    elif network in ("bridge", "default") and policy.allow_network:
        network = "bridge"
    elif network == networks.network_name(policy.instance) and policy.egress_network:
        # Checked against what the engine shows of it, and replaced by its id, by the caller.
        joined = network
    else:
        raise RequestRefused(
            f"network mode {network!r} is not allowed"
            + ("" if policy.allow_network else " (the operator allows no network: use none")
            + (
                f" or the sandbox network {networks.network_name(policy.instance)})"
                if policy.egress_network
                else ")"
            )
        )
    runtime = host.take("Runtime") or "runc"
    networked = {v: k for k, v in NETWORK_RUNTIMES.items() if k != v}
    if runtime in networked:
        # gVisor with a network stack of its own: only on the sandbox network.
        if joined is None or networked[runtime] not in policy.runtimes:
            raise RequestRefused(
                f"runtime {runtime!r} is only for sandboxes on the sandbox network"
            )
    elif runtime not in policy.runtimes:
        raise RequestRefused(
            f"runtime {runtime!r} is not allowed ({', '.join(sorted(policy.runtimes))})"
        )
    ipc = host.take("IpcMode")
    if ipc not in (None, "", "private"):
        raise RequestRefused(f"IpcMode {ipc!r} is not allowed (only private)")
    shm = host.take("ShmSize")
    built: dict[str, Any] = {
        "Privileged": False,
        "ReadonlyRootfs": True,
        "CapDrop": ["ALL"],
        "SecurityOpt": security_options(),
        "Memory": memory,
        "MemorySwap": memory,
        "NanoCpus": j.integer(
            host.take("NanoCpus"), "HostConfig.NanoCpus", 1, int(policy.max_cpus * 1e9)
        ),
        "PidsLimit": j.integer(host.take("PidsLimit"), "HostConfig.PidsLimit", 1, policy.max_pids),
        "NetworkMode": network,
        "Runtime": runtime,
        "IpcMode": "private",
        "ShmSize": 64 * MiB
        if shm is None
        else j.integer(shm, "HostConfig.ShmSize", MiB, policy.max_shm_mb * MiB),
        "OomScoreAdj": j.integer(host.take("OomScoreAdj") or 0, "HostConfig.OomScoreAdj", 0, 1000),
        "Init": j.boolean(host.take("Init"), "HostConfig.Init", True),
        "Ulimits": _ulimits(host.take("Ulimits"), policy),
        "LogConfig": _log_config(host.take("LogConfig"), policy),
        "Tmpfs": _tmpfs(host.take("Tmpfs"), policy, packages=joined is not None),
    }
    volume = _data_mount(host.take("Mounts"))
    built["Mounts"] = [{"Type": "volume", "Source": volume, "Target": DATA_DIR, "ReadOnly": False}]
    host.done()
    return built, volume, joined


def _image(value: Any, policy: Policy) -> str:
    prefix = f"{policy.image_repository}:"
    if not isinstance(value, str) or not value.startswith(prefix):
        raise RequestRefused(f"containers must use the sandbox image ({prefix}...), not {value!r}")
    j.text(value[len(prefix) :], "the image tag", TAG)
    return value


def _environment(value: Any) -> tuple[list[str], dict[str, str]]:
    """The plain variables, rebuilt, and the egress ones (checked against the sandbox
    network by `networks.egress_environment`)."""
    kept: list[str] = []
    egress: dict[str, str] = {}
    seen: set[str] = set()
    for entry in j.strings(value, "Env"):
        name, equals, setting = entry.partition("=")
        if equals and name in networks.EGRESS_ENV and EGRESS_ENV_VALUE.fullmatch(setting):
            egress[name] = setting
        elif not equals or not ENV_NAME.fullmatch(name) or not ENV_VALUE.fullmatch(setting):
            raise RequestRefused(f"the environment variable {name!r} is not allowed in a sandbox")
        if name in seen:
            raise RequestRefused(f"the environment variable {name!r} is set twice")
        seen.add(name)
        if name not in egress:
            kept.append(f"{name}={setting}")
    return kept, egress


def security_options() -> list[str]:
    """The security options of every sandbox: the proxy's own, whatever the client sent."""
    return ["no-new-privileges", f"seccomp={profile_json()}"]


def _security_options(value: Any) -> None:
    """The client's options may only be these same ones: the seccomp profile is the proxy's,
    so a client can neither loosen it (`unconfined`, another profile) nor be misled into
    thinking that one it sent applies."""
    options = j.strings(value, "HostConfig.SecurityOpt")
    plain = [o for o in options if not o.startswith("seccomp=")]
    profiles = [o.removeprefix("seccomp=") for o in options if o.startswith("seccomp=")]
    if plain not in (["no-new-privileges"], ["no-new-privileges:true"]) or len(profiles) > 1:
        raise RequestRefused(
            "HostConfig.SecurityOpt must be no-new-privileges and at most the sandboxes' own "
            "seccomp profile (the engine's default AppArmor profile stays on)"
        )
    if profiles and not _same_profile(profiles[0]):
        raise RequestRefused(
            "HostConfig.SecurityOpt may not choose a seccomp profile: the proxy sets the "
            "sandboxes' own"
        )


def _same_profile(text: str) -> bool:
    try:
        return bool(json.loads(text) == json.loads(profile_json()))
    except ValueError:
        return False


def labels(value: Any, where: str, policy: Policy) -> dict[str, str]:
    """The client's cellmate.* labels, with the sandbox and instance labels the proxy's own."""
    found = j.string_map(value, where)
    for key, setting in found.items():
        j.text(key, f"the label name {key!r}", LABEL_KEY)
        j.text(setting, f"the label {key}", LABEL_VALUE)
    if found.get(SANDBOX_LABEL) != "1":
        raise RequestRefused(f"sandboxes must carry the label {SANDBOX_LABEL}=1")
    instance = found.get(INSTANCE_LABEL, policy.instance)
    if instance != policy.instance:
        raise RequestRefused(
            f"this proxy serves the instance {policy.instance!r}, not {instance!r} "
            f"(the bot's CELLMATE_INSTANCE and the proxy's --instance must match)"
        )
    return {**found, **policy.labels}


def _ulimits(value: Any, policy: Policy) -> list[dict[str, Any]]:
    bounds = {
        "fsize": policy.max_file_size_mb * MiB,
        "nofile": policy.max_open_files,
        "core": 0,
    }
    chosen: dict[str, int] = {}
    if not isinstance(value, list | type(None)):
        raise RequestRefused("HostConfig.Ulimits must be a list")
    for item in value or []:
        limit = j.struct(item, "HostConfig.Ulimits[]")
        name = limit.take("Name")
        if name not in bounds or name in chosen:
            raise RequestRefused(f"the ulimit {name!r} is not allowed (or is set twice)")
        soft = j.integer(limit.take("Soft"), f"ulimit {name} soft", 0, bounds[name])
        hard = j.integer(limit.take("Hard"), f"ulimit {name} hard", 0, bounds[name])
        limit.done()
        if soft != hard:
            raise RequestRefused(f"the ulimit {name} must have equal soft and hard limits")
        chosen[name] = hard
    chosen.setdefault("core", 0)
    chosen.setdefault("fsize", min(256 * MiB, bounds["fsize"]))
    chosen.setdefault("nofile", min(1024, bounds["nofile"]))
    return [{"Name": n, "Soft": v, "Hard": v} for n, v in sorted(chosen.items())]


def _log_config(value: Any, policy: Policy) -> dict[str, Any]:
    """Always the `none` driver: a sandbox's output is the protocol stream and its users' data,
    which the engine must not keep on its disk (attach still streams it). A bounded json-file
    log is accepted from a client, and still replaced."""
    if value is not None:
        config = j.struct(value, "HostConfig.LogConfig")
        kind = config.take("Type")
        options = j.string_map(config.take("Config"), "HostConfig.LogConfig.Config")
        config.done()
        if kind == "none":
            if options:
                raise RequestRefused("the log driver none takes no options")
        elif kind in (None, "", "json-file"):
            if set(options) - {"max-size", "max-file"} or options.get("max-file", "1") != "1":
                raise RequestRefused("LogConfig.Config may set only max-size and max-file 1")
            if "max-size" in options:
                _megabytes(options["max-size"], "the log size", policy.max_log_mb)
        else:
            raise RequestRefused(f"the log driver {kind!r} is not allowed (only none)")
    return {"Type": "none", "Config": {}}


def _tmpfs(value: Any, policy: Policy, packages: bool) -> dict[str, str]:
    """The scratch folder, noexec; and on the sandbox network the place pip installs to,
    which allows execution (compiled extensions load from it)."""
    mounts = j.string_map(value, "HostConfig.Tmpfs")
    built: dict[str, str] = {}
    if packages and PACKAGES_DIR in mounts:
        options = mounts.pop(PACKAGES_DIR)
        size = next((o[5:] for o in options.split(",") if o.startswith("size=")), "512m")
        size_mb = _megabytes(size, f"the {PACKAGES_DIR} size", policy.max_packages_mb)
        built[PACKAGES_DIR] = networks.packages_tmpfs(options, policy, size_mb)
    if set(mounts) - {TMP_DIR}:
        raise RequestRefused(
            f"a tmpfs may be mounted only at {TMP_DIR}"
            + (f" and {PACKAGES_DIR}" if packages else "")
        )
    size_mb = 64
    for option in filter(None, mounts.get(TMP_DIR, "").split(",")):
        key, _, setting = option.partition("=")
        if key == "size":
            size_mb = _megabytes(setting, "the /tmp size", policy.max_tmp_mb)
        elif option not in ("rw", "nosuid", "nodev", "noexec", "mode=1777"):
            raise RequestRefused(f"the tmpfs option {option!r} is not allowed")
    return {TMP_DIR: f"rw,nosuid,nodev,noexec,size={size_mb}m,mode=1777", **built}


def _data_mount(value: Any) -> str:
    if not isinstance(value, list) or len(value) != 1:
        raise RequestRefused(f"a sandbox has exactly one mount: its volume at {DATA_DIR}")
    mount = j.struct(value[0], "HostConfig.Mounts[]")
    if mount.take("Type") != "volume":
        raise RequestRefused("only volume mounts are allowed (no binds, no tmpfs, no npipes)")
    if mount.take("Target") != DATA_DIR:
        raise RequestRefused(f"the volume must be mounted at {DATA_DIR}")
    source = j.text(mount.take("Source"), "the mount's volume", NAME)
    if j.boolean(mount.take("ReadOnly"), "the mount's ReadOnly", False):
        raise RequestRefused(f"{DATA_DIR} must be writable")
    # The executor repeats its volume's options here; the proxy writes its own from the
    # volume it checked (see DockerProxy), so what the client sent is read and dropped.
    options = mount.take("VolumeOptions")
    if options is not None:
        j.struct(options, "the mount's VolumeOptions")
    mount.done()
    return source


def volume(struct: j.Struct, policy: Policy) -> dict[str, Any]:
    """The body for POST /volumes/create: a tmpfs that the sandbox user owns."""
    name = j.text(struct.take("Name"), "the volume name", NAME)
    driver = struct.take("Driver")
    if driver not in (None, "", "local"):
        raise RequestRefused(f"the volume driver {driver!r} is not allowed (only local)")
    options = j.string_map(struct.take("DriverOpts"), "DriverOpts")
    found_labels = labels(struct.take("Labels"), "Labels", policy)
    struct.done()
    if (
        options.get("type") != "tmpfs"
        or options.get("device") != "tmpfs"
        or set(options)
        - {
            "type",
            "device",
            "o",
        }
    ):
        raise RequestRefused("volumes must be tmpfs (a bind of a host folder is not allowed)")
    size_mb = 512
    for option in filter(None, options.get("o", "").split(",")):
        key, _, setting = option.partition("=")
        if key == "size":
            size_mb = _megabytes(setting, "the volume size", policy.max_data_mb)
        elif key in ("uid", "gid", "mode") or option in ("nosuid", "nodev", "noexec"):
            continue  # the proxy sets the owner and the mode itself
        else:
            raise RequestRefused(f"the volume option {option!r} is not allowed")
    mount_options = f"size={size_mb}m,uid={policy.uid},gid={policy.gid},mode=0700,nosuid,nodev"
    return {
        "Name": name,
        "Driver": "local",
        "DriverOpts": {"type": "tmpfs", "device": "tmpfs", "o": mount_options},
        "Labels": found_labels,
    }


def _megabytes(value: str, where: str, most_mb: int) -> int:
    found = SIZE.fullmatch(value.lower())
    if not found:
        raise RequestRefused(f"{where} {value!r} is not a size")
    size = int(found["number"]) * UNITS[found["unit"]]
    size_mb = -(-size // MiB)
    if size_mb > most_mb:
        raise RequestRefused(f"{where} may be at most {most_mb} MiB")
    return size_mb
