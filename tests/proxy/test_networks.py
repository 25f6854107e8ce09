"""The one network a sandbox may join through the proxy: its instance's sandbox network, made
exactly as the executor makes it, with the proxy's variables rebuilt from the network the
engine shows; every other network, runtime, variable or mount that would open a way out is
refused, and without --allow-egress-network no network request passes at all."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dockerproxy import Policy, RequestRefused, networks
from dockerproxy import bodies as build
from dockerproxy.jsonbody import decode
from dockerproxy.routes import plan
from dockerproxy.wire import Request
from executor import SandboxLimits
from executor.egress import PACKAGES_DIR, NetworkInfo, network_name, network_spec
from tests.proxy.bodies import INSTANCE, LABELS, executor_bodies

POLICY = Policy(instance=INSTANCE, egress_network=True)
CLOSED = Policy(instance=INSTANCE)
NAME = network_name(INSTANCE)
INFO = NetworkInfo("f" * 64, NAME, "172.30.0.1", "172.30.0.0/16")
ALLOWLIST = SandboxLimits(egress="allowlist")
_, CONTAINER = executor_bodies(ALLOWLIST, network=INFO)
_, CONTAINER_RUNSC = executor_bodies(
    SandboxLimits(egress="allowlist", runtime="runsc"), network=INFO
)
_, OFFLINE = executor_bodies(SandboxLimits())


def engine_view(**changes: Any) -> dict[str, Any]:
    """The network as the engine's inspection shows the one the executor made."""
    spec = network_spec(INSTANCE, LABELS)
    shown = {
        "Name": spec["name"],
        "Id": INFO.id,
        "Driver": "bridge",
        "Internal": True,
        "Attachable": False,
        "EnableIPv6": False,
        "Ingress": False,
        "ConfigFrom": {"Network": ""},
        "Options": spec["options"],
        "Labels": spec["labels"],
        "IPAM": {"Driver": "default", "Config": [{"Subnet": INFO.subnet, "Gateway": INFO.gateway}]},
    }
    return {**shown, **changes}


def joined(body: dict[str, Any], policy: Policy = POLICY) -> dict[str, Any]:
    """The body the engine gets, as the server finishes it for the network it looked up."""
    built = build.container(decode(json.dumps(body).encode()), policy)
    assert built.network == NAME
    info = networks.check_network(engine_view(), policy)
    built.body["HostConfig"]["NetworkMode"] = info.id
    built.body["Env"] += networks.egress_environment(built.egress_env or {}, info, policy)
    return built.body


def refusal(call: Any, *args: Any) -> str:
    with pytest.raises(RequestRefused) as caught:
        call(*args)
    return str(caught.value)


def container(body: dict[str, Any], policy: Policy = POLICY) -> str:
    return refusal(build.container, decode(json.dumps(body).encode()), policy)


def egress_refusal(body: dict[str, Any]) -> str:
    """Why the body is refused: for characters no such value has, as it is read; else
    when its variables are compared with the proxy's own for the network."""

    def finish() -> None:
        built = build.container(decode(json.dumps(body).encode()), POLICY)
        networks.egress_environment(built.egress_env or {}, INFO, POLICY)

    return refusal(finish)


def with_host(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    changed["HostConfig"].update(changes)
    return changed


def with_env(body: dict[str, Any], env: list[str]) -> dict[str, Any]:
    return {**copy.deepcopy(body), "Env": env}


def test_the_executors_allowlist_sandbox_joins_its_network_with_the_proxy_variables() -> None:
    for body, runtime in ((CONTAINER, "runc"), (CONTAINER_RUNSC, "runsc-net")):
        sent = joined(body)
        host = sent["HostConfig"]
        assert host["NetworkMode"] == INFO.id  # by id: the name was checked, then pinned
        assert host["Runtime"] == runtime
        assert "NetworkDisabled" not in sent
        env = dict(entry.split("=", 1) for entry in sent["Env"])
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            assert env[name] == "http://172.30.0.1:3128"
        assert env["PIP_INDEX_URL"] == "https://pypi.org/simple"
        assert env["PYTHONPATH"] == env["PIP_TARGET"] == PACKAGES_DIR
        packages = host["Tmpfs"][PACKAGES_DIR].split(",")
        assert "exec" in packages
        assert "noexec" not in packages
        assert {"nosuid", "nodev", f"uid={POLICY.uid}", f"gid={POLICY.gid}"} <= set(packages)
        assert "noexec" in host["Tmpfs"]["/tmp"].split(",")


@pytest.mark.parametrize(
    "mode",
    [
        "host",
        "bridge",
        "default",
        "container:cellmate-0123456789abcdef",
        network_name("another-instance"),
        "cellmate-egress-000000000000",
        NAME.upper(),
        NAME + " ",
        INFO.id,  # a network is named, then checked and pinned by the proxy; never by id
    ],
)
def test_no_other_network_can_be_joined(mode: str) -> None:
    assert "network mode" in container(with_host(CONTAINER, NetworkMode=mode))


def test_without_the_option_the_sandbox_network_is_refused_too() -> None:
    assert "network mode" in container(CONTAINER, CLOSED)
    assert "operator allows no sandbox network" in refusal(
        networks.check_network, engine_view(), CLOSED
    )


@pytest.mark.parametrize(
    "env",
    [
        ["HTTP_PROXY=http://172.30.0.1:3128"],
        ["https_proxy=http://203.0.113.9:3128"],
        ["PIP_INDEX_URL=https://pypi.org/simple"],
        ["PYTHONPATH=/opt/cellmate-packages"],
        ["PIP_TARGET=/mnt/data"],
    ],
)
def test_a_sandbox_without_the_network_gets_none_of_its_variables(env: list[str]) -> None:
    refused = container(with_env(OFFLINE, env))
    assert "only for sandboxes on the sandbox network" in refused


def _swap(name: str, value: str) -> list[str]:
    env = [e for e in CONTAINER["Env"] if not e.startswith(name + "=")]
    return [*env, f"{name}={value}"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HTTP_PROXY", "http://172.30.0.1:8080"),  # another port of the host
        ("HTTPS_PROXY", "http://172.17.0.1:3128"),  # another address
        ("http_proxy", "http://localhost:3128"),
        ("NO_PROXY", "*"),  # everything direct
        ("no_proxy", "localhost,127.0.0.1,::1,172.30.0.1"),
        ("PYTHONPATH", "/mnt/data"),
        ("PIP_TARGET", "/tmp"),
    ],
)
def test_the_variables_must_be_the_proxys_own(name: str, value: str) -> None:
    refused = egress_refusal(with_env(CONTAINER, _swap(name, value)))
    assert name in refused


def test_a_missing_variable_is_refused() -> None:
    env = [e for e in CONTAINER["Env"] if not e.startswith("HTTPS_PROXY=")]
    built = build.container(decode(json.dumps(with_env(CONTAINER, env)).encode()), POLICY)
    assert "HTTPS_PROXY" in refusal(
        networks.egress_environment, built.egress_env or {}, INFO, POLICY
    )


@pytest.mark.parametrize(
    "index",
    [
        "https://user:secret@mirror.example/simple",
        "file:///etc/passwd",
        "https://mirror.example/simple?token=1",
        "https://mirror.example/simple#x",
        "",
    ],
)
def test_the_index_is_a_plain_url(index: str) -> None:
    refused = egress_refusal(with_env(CONTAINER, _swap("PIP_INDEX_URL", index)))
    assert "PIP_INDEX_URL" in refused or "package index URL" in refused


def test_the_networked_gvisor_runtime_is_only_for_the_sandbox_network() -> None:
    refused = container(with_host(OFFLINE, Runtime="runsc-net"))
    assert "only for sandboxes on the sandbox network" in refused
    # Nor when the operator allows gVisor not at all.
    only_runc = Policy(instance=INSTANCE, egress_network=True, runtimes=frozenset({"runc"}))
    assert "runsc-net" in container(CONTAINER_RUNSC, only_runc)


@pytest.mark.parametrize(
    "options",
    [
        "rw,exec,suid,size=64m",
        "rw,exec,dev,size=64m",
        "rw,exec,size=64m,nr_inodes=0",
        "rw,exec,size=999g",
    ],
)
def test_the_packages_mount_stays_a_small_tmpfs_without_devices_or_setuid(options: str) -> None:
    body = copy.deepcopy(CONTAINER)
    body["HostConfig"]["Tmpfs"][PACKAGES_DIR] = options
    refused = container(body)
    assert PACKAGES_DIR in refused or "at most" in refused


def test_the_packages_mount_is_owned_by_the_sandbox_user_whatever_was_asked() -> None:
    body = copy.deepcopy(CONTAINER)
    body["HostConfig"]["Tmpfs"][PACKAGES_DIR] = "rw,exec,size=64m,uid=0,gid=0"
    sent = joined(body)["HostConfig"]["Tmpfs"][PACKAGES_DIR].split(",")
    assert "uid=0" not in sent
    assert f"uid={POLICY.uid}" in sent
    assert "size=64m" in sent


@pytest.mark.parametrize("target", [PACKAGES_DIR, "/opt", "/usr/local/lib"])
def test_no_exec_mount_without_the_network(target: str) -> None:
    body = copy.deepcopy(OFFLINE)
    body["HostConfig"]["Tmpfs"][target] = "rw,exec,size=64m"
    assert "a tmpfs may be mounted only at /tmp" in container(body)


@pytest.mark.parametrize(
    "changes",
    [
        {"Internal": False},
        {"Driver": "macvlan"},
        {"EnableIPv6": True},
        {"Attachable": True},
        {"Name": "cellmate-egress-000000000000"},
        {
            "Options": {
                **network_spec(INSTANCE, LABELS)["options"],
                "com.docker.network.bridge.enable_icc": "true",
            }
        },
        {
            "Options": {
                **network_spec(INSTANCE, LABELS)["options"],
                "com.docker.network.bridge.name": "docker0",
            }
        },
        {"Options": {}},
        {"ConfigFrom": {"Network": "bridge"}},
        {"IPAM": {"Config": []}},
    ],
)
def test_only_a_network_made_as_the_sandbox_network_can_be_joined(changes: dict[str, Any]) -> None:
    assert refusal(networks.check_network, engine_view(**changes), POLICY)


def _network_body(**changes: Any) -> dict[str, Any]:
    spec = network_spec(INSTANCE, LABELS)
    body = {
        "Name": spec["name"],
        "Driver": "bridge",
        "Options": spec["options"],
        "CheckDuplicate": True,
        "Labels": spec["labels"],
        "Internal": True,
        "Attachable": False,
    }
    return {k: v for k, v in {**body, **changes}.items() if v is not None}


def test_the_executors_network_is_made_as_specified() -> None:
    made = networks.create_body(decode(json.dumps(_network_body()).encode()), POLICY)
    assert made["Internal"] is True
    assert made["EnableIPv6"] is False
    assert made["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    assert made["Labels"] == LABELS


@pytest.mark.parametrize(
    "changes",
    [
        {"Internal": None},
        {"Internal": False},
        {"Name": "my-network"},
        {"Name": network_name("another-instance")},
        {"Driver": "host"},
        {"EnableIPv6": True},
        {"Attachable": True},
        {"IPAM": {"Config": [{"Subnet": "192.0.2.0/24", "Gateway": "192.0.2.2"}]}},
        {"Options": {"com.docker.network.bridge.name": "docker0"}},
        {"Labels": {"cellmate.sandbox": "1", "cellmate.instance": "another-instance"}},
        {"ConfigFrom": {"Network": "bridge"}},
        {"Ingress": True},
        {"Unknown": 1},
    ],
)
def test_no_other_network_can_be_made(changes: dict[str, Any]) -> None:
    body = decode(json.dumps(_network_body(**changes)).encode())
    assert refusal(networks.create_body, body, POLICY)
    assert "no sandbox network" in refusal(
        networks.create_body, decode(json.dumps(_network_body()).encode()), CLOSED
    )


def request(
    method: str, path: str, query: dict[str, str] | None = None, length: int = 0
) -> Request:
    return Request(method, (1, 41), path, query or {}, length)


def test_network_requests_are_the_executors_own() -> None:
    listed = plan(
        request("GET", "/networks", {"filters": '{"label": ["cellmate.sandbox=1"]}'}), POLICY
    )
    assert json.loads(listed.query["filters"])["label"] == [f"{k}={v}" for k, v in LABELS.items()]
    assert plan(request("POST", "/networks/create", length=10), POLICY).body == "network"
    inspect = plan(request("GET", f"/networks/{NAME}"), POLICY)
    assert inspect.target == ("networks", NAME)
    assert inspect.path == "/networks/{id}"
    remove = plan(request("DELETE", f"/networks/{NAME}"), POLICY)
    assert remove.target == ("networks", NAME)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", f"/networks/{NAME}/connect"),
        ("POST", f"/networks/{NAME}/disconnect"),
        ("POST", "/networks/prune"),
        ("PUT", f"/networks/{NAME}"),
        ("GET", "/networks/../containers/json"),
    ],
)
def test_other_network_requests_are_refused(method: str, path: str) -> None:
    assert refusal(plan, request(method, path), POLICY)


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/networks"), ("POST", "/networks/create"), ("GET", f"/networks/{NAME}")],
)
def test_without_the_option_no_network_request_passes(method: str, path: str) -> None:
    assert "no sandbox network" in refusal(plan, request(method, path), CLOSED)
