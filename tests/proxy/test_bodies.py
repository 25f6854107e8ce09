"""The proxy's body builders: every request body the engine gets is rebuilt from allowed
fields, whatever case, duplicates, extra fields or value types a client sends."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dockerproxy import Policy, RequestRefused
from dockerproxy import bodies as build
from dockerproxy.jsonbody import decode
from executor import SandboxLimits
from tests.proxy.bodies import INSTANCE, assert_safe_container, assert_safe_volume, executor_bodies

POLICY = Policy(instance=INSTANCE)
VOLUME, CONTAINER = executor_bodies(SandboxLimits())
_, CONTAINER_RUNSC = executor_bodies(SandboxLimits(runtime="runsc", memory_mb=512, cpus=0.5))


def container(body: Any, policy: Policy = POLICY) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.dumps(build.container(decode(raw), policy).body).encode()


def volume(body: Any, policy: Policy = POLICY) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.dumps(build.volume(decode(raw), policy)).encode()


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(RequestRefused) as caught:
        call(*args)
    return str(caught.value)


def with_host(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(CONTAINER)
    body["HostConfig"].update(changes)
    return body


def test_the_executors_own_bodies_pass_and_come_out_safe() -> None:
    for body in (CONTAINER, CONTAINER_RUNSC):
        assert_safe_container(container(body), POLICY)
    assert_safe_volume(volume(VOLUME), POLICY)


def test_the_executor_runs_as_the_policys_user() -> None:
    # The proxy and the executor ship the same default sandbox user.
    assert CONTAINER["User"] == POLICY.user


# Keys in another case, or twice: the engine matches them to the same field, the last wins.
CASE_AND_DUPLICATES = [
    b'"user": "0"',
    b'"USER": "0:0"',
    b'"hostconfig": {"Privileged": true}',
    b'"HostConfig": {"Binds": ["/:/host"]}',
    b'"User": "0"',
    b'"us\xc5\xbfer": "0"',  # a long s, which Go folds onto "s"
    b'"Image": "busybox"',
]


@pytest.mark.parametrize("extra", CASE_AND_DUPLICATES)
def test_a_field_twice_or_in_another_case_is_refused(extra: bytes) -> None:
    raw = json.dumps(CONTAINER).encode()
    for spliced in (b"{" + extra + b", " + raw[1:], raw[:-1] + b", " + extra + b"}"):
        assert refused(container, spliced)


@pytest.mark.parametrize(
    "key",
    ["privileged", "PRIVILEGED", "capAdd", "networkmode", "binds", "Privileged\u212a"],
)
def test_host_config_keys_in_any_case_are_refused_when_twice(key: str) -> None:
    host = json.dumps(CONTAINER["HostConfig"]).encode()
    value = {"privileged": "true", "PRIVILEGED": "true", "capAdd": '["SYS_ADMIN"]'}.get(
        key, '"host"'
    )
    doubled = host[:-1] + f', "{key}": {value}'.encode() + b"}"
    for name in ("Privileged", "CapAdd", "NetworkMode", "Binds"):
        if key.lower() == name.lower():
            doubled = doubled.replace(f'"{name}"'.encode(), b'"_"', 0)
    raw = json.dumps({**CONTAINER, "HostConfig": None}).encode()
    raw = raw.replace(b'"HostConfig": null', b'"HostConfig": ' + doubled)
    assert refused(container, raw)


@pytest.mark.parametrize(
    "user", ["0", "00", "+0:0", "0000:1000", "root", "0:0", "61000:0", "1000:1000", " 61000:61000",
             "61000:61000 ", "061000:61000", "61000", "61000:61000:0", "", None, 61000, True]
)  # fmt: skip
def test_only_the_sandbox_user_is_allowed(user: Any) -> None:
    assert "sandbox user" in refused(container, {**CONTAINER, "User": user})


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"Privileged": True}, "privileged"),
        ({"Privileged": 1}, "true or false"),
        ({"ReadonlyRootfs": False}, "read-only"),
        ({"CapDrop": []}, "capability"),
        ({"CapAdd": ["SYS_ADMIN"]}, "CapAdd"),
        ({"SecurityOpt": ["no-new-privileges", "seccomp=unconfined"]}, "SecurityOpt"),
        ({"SecurityOpt": ["no-new-privileges", "apparmor=unconfined"]}, "SecurityOpt"),
        ({"SecurityOpt": ["no-new-privileges:false"]}, "SecurityOpt"),
        ({"SecurityOpt": []}, "SecurityOpt"),
        ({"GroupAdd": ["0"]}, "GroupAdd"),
        ({"GroupAdd": ["docker", "shadow"]}, "GroupAdd"),
        ({"MaskedPaths": []}, "MaskedPaths"),
        ({"ReadonlyPaths": []}, "ReadonlyPaths"),
        ({"Memory": 0}, "Memory"),
        ({"Memory": 2**62}, "Memory"),
        ({"Memory": "1073741824"}, "whole number"),
        ({"Memory": 1.5e9}, "whole number"),
        ({"MemorySwap": -1}, "MemorySwap"),
        ({"PidsLimit": -1}, "PidsLimit"),
        ({"PidsLimit": 0}, "PidsLimit"),
        ({"NanoCpus": 0}, "NanoCpus"),
        ({"OomKillDisable": True}, "OomKillDisable"),
        ({"OomScoreAdj": -1000}, "OomScoreAdj"),
        ({"Sysctls": {"kernel.core_pattern": "|/bin/sh"}}, "Sysctls"),
        ({"DeviceCgroupRules": ["a *:* rwm"]}, "DeviceCgroupRules"),
        ({"Devices": [{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda"}]}, "Devices"),
        ({"Tmpfs": {"/tmp": "rw,exec,suid,size=64m"}}, "tmpfs option"),
        ({"Tmpfs": {"/run": "rw"}}, "tmpfs"),
        ({"NetworkMode": "bridge"}, "network"),
        ({"NetworkMode": "host"}, "network"),
        ({"NetworkMode": "container:other"}, "network"),
        ({"PidMode": "host"}, "PidMode"),
        ({"IpcMode": "host"}, "IpcMode"),
        ({"UTSMode": "host"}, "UTSMode"),
        ({"UsernsMode": "host"}, "UsernsMode"),
        ({"CgroupnsMode": "host"}, "CgroupnsMode"),
        ({"CgroupParent": "/"}, "CgroupParent"),
        ({"Binds": ["/:/host"]}, "Binds"),
        ({"VolumesFrom": ["other"]}, "VolumesFrom"),
        ({"Runtime": "io.containerd.runc.v2"}, "runtime"),
        ({"Mounts": [{"Type": "bind", "Source": "/", "Target": "/mnt/data"}]}, "volume"),
        (
            {"Mounts": [{"Type": "volume", "Source": "v", "Target": "/mnt/data",
                         "VolumeOptions": ["not", "options"]}]},
            "VolumeOptions",
        ),
        ({"Mounts": []}, "exactly one mount"),
        ({"Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 2**40}]}, "nofile"),
        ({"Ulimits": [{"Name": "rtprio", "Soft": 99, "Hard": 99}]}, "rtprio"),
        ({"LogConfig": {"Type": "syslog", "Config": {}}}, "log driver"),
        ({"Init": "yes"}, "true or false"),
    ],
)  # fmt: skip
def test_host_fields_outside_the_policy_are_refused(changes: dict[str, Any], reason: str) -> None:
    assert reason in refused(container, with_host(**changes))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"Image": "busybox:latest"}, "sandbox image"),
        ({"Image": "cellmate-sandbox:x/../../busybox"}, "tag"),
        ({"Entrypoint": ["/bin/sh"]}, "Entrypoint"),
        ({"Cmd": ["sh", "-c", "id"]}, "Cmd"),
        ({"Env": ["LD_PRELOAD=/tmp/x.so"]}, "LD_PRELOAD"),
        ({"Env": ["PYTHONPATH=/mnt/data"]}, "PYTHONPATH"),
        ({"Env": ["OMP_NUM_THREADS=1", "OMP_NUM_THREADS=64"]}, "twice"),
        ({"Env": ["CELLMATE_PRELOAD=numpy');__import__('os').system('id"]}, "CELLMATE_PRELOAD"),
        ({"Env": ["CELLMATE_PRELOAD=numpy\nLD_PRELOAD=/tmp/x.so"]}, "CELLMATE_PRELOAD"),
        ({"Labels": {"cellmate.instance": "x"}}, "cellmate.sandbox"),
        ({"Labels": {"cellmate.sandbox": "1", "com.docker.compose.project": "x"}}, "label"),
        ({"Tty": True}, "Tty"),
        ({"WorkingDir": "/"}, "WorkingDir"),
        ({"Volumes": {"/host": {}}}, "Volumes"),
        ({"NetworkingConfig": {"EndpointsConfig": {"host": {}}}}, "NetworkingConfig"),
        ({"Healthcheck": {"Test": ["CMD", "id"]}}, "Healthcheck"),
        ({"ExtraField": 1}, "not something the executor sends"),
        ({"HostConfig": None}, "HostConfig"),
    ],
)
def test_container_fields_outside_the_policy_are_refused(
    changes: dict[str, Any], reason: str
) -> None:
    assert reason in refused(container, {**CONTAINER, **changes})


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b"null",
        b'{"User": NaN}',
        b'{"HostConfig": {"Memory": Infinity}}',
        b"\xff\xfe{}",
        b'{"a": ' * 50 + b"1" + b"}" * 50,
        b"{" + b'"\\u0055ser": "0", ' + json.dumps(CONTAINER).encode()[1:],
    ],
)
def test_bodies_that_are_not_plain_json_objects_are_refused(raw: bytes) -> None:
    assert refused(container, raw)


def test_the_network_needs_the_operators_consent() -> None:
    bridged = with_host(NetworkMode="bridge")
    assert "network" in refused(container, bridged)
    allowed = Policy(instance=INSTANCE, allow_network=True)
    assert_safe_container(container(bridged, allowed), allowed)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"DriverOpts": {"type": "none", "o": "bind", "device": "/etc"}}, "tmpfs"),
        ({"DriverOpts": {"type": "tmpfs", "device": "tmpfs", "Type": "none"}}, "tmpfs"),
        ({"DriverOpts": {"type": "tmpfs", "device": "/etc", "o": "bind"}}, "tmpfs"),
        ({"DriverOpts": {"type": "tmpfs", "device": "tmpfs", "o": "size=1m,bind"}}, "bind"),
        ({"DriverOpts": {"type": "tmpfs", "device": "tmpfs", "o": "size=1m,exec,suid"}}, "exec"),
        ({"DriverOpts": {"type": "tmpfs", "device": "tmpfs", "o": "size=99999g"}}, "at most"),
        ({"Driver": "vieux/sshfs"}, "driver"),
        ({"Labels": {}}, "cellmate.sandbox"),
        ({"Name": "../etc"}, "volume name"),
        ({"Mountpoint": "/etc"}, "not something the executor sends"),
    ],
)
def test_volumes_outside_the_policy_are_refused(changes: dict[str, Any], reason: str) -> None:
    assert reason in refused(volume, {**VOLUME, **changes})


def test_volume_options_in_another_case_are_refused() -> None:
    raw = json.dumps(VOLUME).encode()[:-1]
    for spliced in (
        raw + b', "driverOpts": {"type": "none", "o": "bind", "device": "/"}}',
        raw + b', "DRIVEROPTS": {"type": "none", "o": "bind", "device": "/"}}',
        raw + b', "driver": "local"}',
    ):
        assert "same field" in refused(volume, spliced)


def test_the_proxy_sets_the_owner_and_mode_of_a_volume() -> None:
    opts = {"type": "tmpfs", "device": "tmpfs", "o": "size=8m,uid=0,gid=0,mode=4777"}
    built = json.loads(volume({**VOLUME, "DriverOpts": opts}))
    assert built["DriverOpts"]["o"] == "size=8m,uid=61000,gid=61000,mode=0700,nosuid,nodev"


# Property: whatever a client does to the executor's own bodies, what the proxy forwards
# (read the way the engine reads it) meets the policy, or the request is refused.

DANGEROUS_TOP: list[tuple[str, Any]] = [
    ("User", "0"), ("User", "00"), ("User", "+0:0"), ("User", "0000:1000"), ("User", "root"),
    ("User", 0), ("Image", "busybox"), ("Entrypoint", ["/bin/sh"]), ("Cmd", ["id"]),
    ("Env", ["LD_PRELOAD=/x"]), ("Labels", {"cellmate.sandbox": "0"}), ("Tty", True),
    ("NetworkingConfig", {"EndpointsConfig": {"host": {}}}), ("Volumes", {"/h": {}}),
    ("Privileged", True), ("Binds", ["/:/host"]), ("HostConfig", {"Privileged": True}),
]  # fmt: skip
DANGEROUS_HOST: list[tuple[str, Any]] = [
    ("Privileged", True), ("Privileged", 1), ("Privileged", "true"), ("CapAdd", ["ALL"]),
    ("CapDrop", []), ("Binds", ["/:/host:rw"]), ("GroupAdd", ["0"]), ("SecurityOpt", []),
    ("SecurityOpt", ["seccomp=unconfined", "no-new-privileges"]), ("MaskedPaths", []),
    ("Memory", 0), ("Memory", "0"), ("Memory", -1), ("MemorySwap", -1), ("PidsLimit", -1),
    ("PidsLimit", 0), ("OomKillDisable", True), ("Sysctls", {"net.ipv4.ip_forward": "1"}),
    ("DeviceCgroupRules", ["a *:* rwm"]), ("Tmpfs", {"/tmp": "exec,suid"}),
    ("NetworkMode", "host"), ("NetworkMode", "bridge"), ("PidMode", "host"),
    ("IpcMode", "host"), ("UsernsMode", "host"), ("ReadonlyRootfs", False),
    ("ReadonlyRootfs", 0), ("Runtime", "kata"), ("CgroupParent", "/"), ("NanoCpus", 0),
    ("Mounts", [{"Type": "bind", "Source": "/", "Target": "/mnt/data"}]),
    ("Ulimits", [{"Name": "nofile", "Soft": -1, "Hard": -1}]), ("OomScoreAdj", -1000),
]  # fmt: skip


def _emit(value: Any, is_object: bool = False) -> str:
    if is_object:
        return (
            "{"
            + ", ".join(json.dumps(k) + ": " + _emit(v, isinstance(v, Obj)) for k, v in value)
            + "}"
        )
    if isinstance(value, Obj):
        return _emit(value, True)
    if isinstance(value, list):
        return "[" + ", ".join(_emit(v, isinstance(v, Obj)) for v in value) + "]"
    return json.dumps(value)


class Obj(list[list[Any]]):
    """A JSON object as mutable [key, value] pairs, so duplicates can be written."""


def _objects(value: Any) -> Any:
    if isinstance(value, dict):
        return Obj([[key, _objects(item)] for key, item in value.items()])
    if isinstance(value, list):
        return [_objects(item) for item in value]
    return value


RECASINGS = st.sampled_from(["lower", "upper", "swap", "kelvin", "long-s"])


def _recase(key: str, how: str) -> str:
    return {
        "lower": key.lower(),
        "upper": key.upper(),
        "swap": key.swapcase(),
        "kelvin": key.replace("k", "\u212a").replace("K", "\u212a"),
        "long-s": key.replace("s", "\u017f"),
    }[how]


MUTATIONS = st.one_of(
    st.tuples(st.just("recase"), st.sampled_from(["top", "host"]), st.integers(0, 40), RECASINGS),
    st.tuples(st.just("add-top"), st.sampled_from(DANGEROUS_TOP), RECASINGS, st.booleans()),
    st.tuples(st.just("add-host"), st.sampled_from(DANGEROUS_HOST), RECASINGS, st.booleans()),
    st.tuples(st.just("set-top"), st.sampled_from(DANGEROUS_TOP), st.just(""), st.just(False)),
    st.tuples(st.just("set-host"), st.sampled_from(DANGEROUS_HOST), st.just(""), st.just(False)),
)


def _folded(key: str) -> str:
    return key.replace("\u017f", "s").replace("\u212a", "k").lower()


def _mutate(body: Obj, mutation: tuple[Any, ...]) -> None:
    kind = mutation[0]
    # Found as Go's decoder finds it: a recased key (long s, Kelvin sign) still names it.
    host = next(v for k, v in body if _folded(k) == "hostconfig" and isinstance(v, Obj))
    if kind == "recase":
        _, where, index, how = mutation
        target = body if where == "top" else host
        pair = target[index % len(target)]
        pair[0] = _recase(pair[0], how)
        return
    _, (key, value), how, first = mutation
    target = body if kind.endswith("top") else host
    if kind.startswith("set"):
        for pair in target:
            if pair[0].lower() == key.lower():
                pair[1] = _objects(value)
                return
        target.append([key, _objects(value)])
        return
    pair = [_recase(key, how) if how else key, _objects(value)]
    if first:
        target.insert(0, pair)
    else:
        target.append(pair)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([CONTAINER, CONTAINER_RUNSC]),
    mutations=st.lists(MUTATIONS, min_size=1, max_size=4),
)
def test_every_forwarded_body_meets_the_policy(
    base: dict[str, Any], mutations: list[tuple[Any, ...]]
) -> None:
    body = _objects(copy.deepcopy(base))
    for mutation in mutations:
        _mutate(body, mutation)
    raw = _emit(body, True).encode()
    try:
        forwarded = container(raw)
    except RequestRefused:
        return  # refusing is always safe
    assert_safe_container(forwarded, POLICY)
