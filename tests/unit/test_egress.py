"""The allowlist network's decisions, without an engine: what a sandbox is asked for in each
mode (`off` exactly as before), the names and runtime it gets, and the settings that choose it."""

from __future__ import annotations

import re

import pytest

from bot.settings import SettingsError, load_settings
from executor import SandboxLimits
from executor.docker_specs import sandbox_specs
from executor.egress import (
    PACKAGES_DIR,
    NetworkInfo,
    bridge_name,
    check_index_url,
    engine_runtime,
    network_name,
    network_spec,
    read_network,
    sandbox_environment,
)

LABELS = {"cellmate.sandbox": "1", "cellmate.instance": "unit"}
INFO = NetworkInfo("a" * 64, network_name("unit"), "172.31.0.1", "172.31.0.0/16")
ENGINE_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


@pytest.mark.parametrize("instance", ["default", "a:b@c+d=e", "x" * 128, "tests-gw0"])
def test_names_suit_the_engine_and_the_kernel_whatever_the_instance(instance: str) -> None:
    assert ENGINE_NAME.fullmatch(network_name(instance))
    assert len(bridge_name(instance)) <= 15  # the kernel's limit for an interface name
    assert bridge_name(instance).startswith("cellmate-")
    assert network_name(instance) != network_name(instance + "x")


def test_gvisor_gets_a_network_stack_only_in_allowlist_mode() -> None:
    assert engine_runtime("runsc", "off") == "runsc"
    assert engine_runtime("runsc", "allowlist") == "runsc-net"
    assert engine_runtime("runc", "allowlist") == "runc"


def test_off_asks_the_engine_for_exactly_what_it_did_before() -> None:
    for runtime in ("runc", "runsc"):
        limits = SandboxLimits(runtime=runtime, pip_index_url="https://mirror.example/simple")
        _, container = sandbox_specs("img:1", "cellmate-0", limits, LABELS)
        assert container["network_mode"] == "none"
        assert container["runtime"] == runtime
        assert set(container["tmpfs"]) == {"/tmp"}
        assert not any(
            "PROXY" in name.upper() or "PIP" in name for name in container["environment"]
        )
        # The index is a setting of allowlist mode: in off mode it does not split the pool.
        assert limits.container_spec() == SandboxLimits(runtime=runtime).container_spec()


def test_allowlist_joins_the_instances_network_with_the_proxy_in_the_environment() -> None:
    limits = SandboxLimits(runtime="runsc", egress="allowlist", proxy_port=3129)
    _, container = sandbox_specs("img:1", "cellmate-0", limits, LABELS, INFO)
    assert container["network_mode"] == INFO.name
    assert container["runtime"] == "runsc-net"
    assert container["environment"]["HTTPS_PROXY"] == "http://172.31.0.1:3129"
    assert container["environment"]["PYTHONPATH"] == PACKAGES_DIR
    options = container["tmpfs"][PACKAGES_DIR].split(",")
    assert "exec" in options
    assert "size=512m" in options
    assert "noexec" in container["tmpfs"]["/tmp"].split(",")
    assert limits.container_spec() != SandboxLimits(runtime="runsc").container_spec()


def test_a_network_is_given_exactly_in_allowlist_mode() -> None:
    with pytest.raises(ValueError, match="exactly when"):
        sandbox_specs("img:1", "cellmate-0", SandboxLimits(), LABELS, INFO)
    with pytest.raises(ValueError, match="exactly when"):
        sandbox_specs("img:1", "cellmate-0", SandboxLimits(egress="allowlist"), LABELS)


def test_the_environment_holds_no_credential() -> None:
    env = sandbox_environment(("172.31.0.1", 3128), "https://mirror.example/simple")
    assert set(env.values()) >= {"http://172.31.0.1:3128", "https://mirror.example/simple"}
    assert not any("@" in value for value in env.values())


@pytest.mark.parametrize(
    "url",
    [
        "https://user:token@mirror.example/simple",
        "ftp://mirror.example/simple",
        "https://mirror.example/simple?x=1",
        "https://mirror.example/simple#frag",
        "https://mirror.example/simple\nPIP_TRUSTED_HOST=x",
        "",
    ],
)
def test_index_urls_are_plain(url: str) -> None:
    with pytest.raises(ValueError, match="plain http"):
        check_index_url(url)
    with pytest.raises(ValueError, match="plain http"):
        SandboxLimits(egress="allowlist", pip_index_url=url)


def test_the_whole_network_and_the_allowlist_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="cannot both be on"):
        SandboxLimits(network=True, egress="allowlist")
    with pytest.raises(ValueError, match="allowlist network"):
        SandboxLimits(network=True, runtime="runsc")
    with pytest.raises(ValueError, match="port"):
        SandboxLimits(egress="allowlist", proxy_port=70000)


def test_the_network_is_made_internal_without_traffic_between_sandboxes() -> None:
    spec = network_spec("unit", LABELS)
    assert spec["internal"] is True
    assert spec["enable_ipv6"] is False
    assert spec["options"]["com.docker.network.bridge.enable_icc"] == "false"
    assert spec["options"]["com.docker.network.bridge.name"] == bridge_name("unit")
    assert spec["labels"] == LABELS


def test_the_proxy_address_is_the_ipv4_gateway() -> None:
    shown = {
        "Id": "b" * 64,
        "Name": "n",
        "IPAM": {
            "Config": [
                {"Subnet": "fd00:1::/64", "Gateway": "fd00:1::1"},
                {"Subnet": "172.31.0.0/16", "Gateway": "172.31.0.1"},
            ]
        },
    }
    assert read_network(shown).gateway == "172.31.0.1"
    with pytest.raises(ValueError, match="no IPv4 gateway"):
        read_network({"Name": "n", "IPAM": {"Config": []}})


def test_settings_choose_the_mode_by_its_deployment_names() -> None:
    loaded = load_settings(
        {
            "CELLMATE_NETWORK": "allowlist",
            "CELLMATE_PIP_INDEX_URL": "https://mirror.example/pypi/simple",
            "CELLMATE_NETWORK_PROXY_PORT": "3130",
            "CELLMATE_SANDBOX_RUNTIME": "runsc",
        },
        env_file=None,
    )
    assert loaded.sandbox.egress == "allowlist"
    assert loaded.sandbox.pip_index_url == "https://mirror.example/pypi/simple"
    assert loaded.sandbox.proxy_port == 3130
    assert load_settings({}, env_file=None).sandbox.egress == "off"
    with pytest.raises(SettingsError, match="CELLMATE_NETWORK must be one of off, allowlist"):
        load_settings({"CELLMATE_NETWORK": "open"}, env_file=None)
    with pytest.raises(SettingsError, match="plain http"):
        load_settings(
            {"CELLMATE_NETWORK": "allowlist", "CELLMATE_PIP_INDEX_URL": "https://u:p@x/simple"},
            env_file=None,
        )
