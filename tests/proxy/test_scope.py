"""The proxy serves one bot instance: what it creates carries that instance's labels (its own,
never the client's), lists show only that instance, logs are never served, the engine keeps
no log, and the seccomp profile is the proxy's."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dockerproxy import Policy, RequestRefused
from dockerproxy import bodies as build
from dockerproxy.jsonbody import decode
from dockerproxy.routes import NO_LOGS, plan
from dockerproxy.wire import Request
from executor import SandboxLimits
from executor.seccomp import profile_json
from tests.proxy.bodies import INSTANCE, executor_bodies

POLICY = Policy(instance=INSTANCE)
VOLUME, CONTAINER = executor_bodies(SandboxLimits())
OURS = {"cellmate.sandbox": "1", "cellmate.instance": INSTANCE}


def container(body: dict[str, Any], policy: Policy = POLICY) -> dict[str, Any]:
    return build.container(decode(json.dumps(body).encode()), policy).body


def with_labels(labels: Any) -> dict[str, Any]:
    return {**copy.deepcopy(CONTAINER), "Labels": labels}


def refusal(call: Any, *args: Any) -> str:
    with pytest.raises(RequestRefused) as caught:
        call(*args)
    return str(caught.value)


def test_created_objects_carry_the_proxys_instance() -> None:
    assert container(CONTAINER)["Labels"] == OURS
    assert build.volume(decode(json.dumps(VOLUME).encode()), POLICY)["Labels"] == OURS
    # A client that leaves the instance out still gets it.
    assert container(with_labels({"cellmate.sandbox": "1"}))["Labels"] == OURS
    kept = container(with_labels({**OURS, "cellmate.session": "abc"}))["Labels"]
    assert kept == {**OURS, "cellmate.session": "abc"}


@pytest.mark.parametrize(
    "labels",
    [
        {"cellmate.sandbox": "1", "cellmate.instance": "victim"},
        {"cellmate.sandbox": "1", "cellmate.instance": ""},
        {"cellmate.sandbox": "1", "cellmate.instance": INSTANCE + "x"},
        {"cellmate.sandbox": "1", "cellmate.instance": INSTANCE.upper()},
    ],
)
def test_a_create_with_another_instances_label_is_refused(labels: dict[str, str]) -> None:
    assert "this proxy serves the instance" in refusal(container, with_labels(labels))
    volume = {**VOLUME, "Labels": labels}
    assert "this proxy serves the instance" in refusal(
        build.volume, decode(json.dumps(volume).encode()), POLICY
    )


def test_the_instance_label_in_another_case_or_twice_is_refused() -> None:
    # The container's own labels first, so that the duplicate goes into them (the volume
    # mount carries labels of its own).
    ordered = {"Labels": CONTAINER["Labels"], **CONTAINER}
    raw = json.dumps(ordered).replace(
        '"Labels": {', '"Labels": {"cellmate.instance": "victim", ', 1
    )
    assert refusal(build.container, decode(raw.encode()), POLICY)
    for key in ("Cellmate.Instance", "CELLMATE.INSTANCE", "cellmate.instance "):
        assert refusal(container, with_labels({**OURS, key: "victim"}))


@pytest.mark.parametrize(
    "log_config",
    [
        None,
        {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "1"}},
        {"Type": "json-file", "Config": {}},
        {"Type": "none", "Config": {}},
        {"Type": "none"},
    ],
)
def test_the_engine_keeps_no_log_of_a_sandbox(log_config: Any) -> None:
    body = copy.deepcopy(CONTAINER)
    body["HostConfig"]["LogConfig"] = log_config
    if log_config is None:
        del body["HostConfig"]["LogConfig"]
    assert container(body)["HostConfig"]["LogConfig"] == {"Type": "none", "Config": {}}


@pytest.mark.parametrize(
    "log_config",
    [
        {"Type": "local", "Config": {}},
        {"Type": "journald", "Config": {}},
        {"Type": "none", "Config": {"cache-disabled": "false"}},
        {"Type": "json-file", "Config": {"max-file": "100"}},
    ],
)
def test_other_log_configurations_are_refused(log_config: Any) -> None:
    body = copy.deepcopy(CONTAINER)
    body["HostConfig"]["LogConfig"] = log_config
    assert refusal(container, body)


def test_the_seccomp_profile_is_the_proxys() -> None:
    ours = f"seccomp={profile_json()}"
    for options in (
        ["no-new-privileges"],
        ["no-new-privileges:true"],
        ["no-new-privileges", ours],
        [ours, "no-new-privileges"],
        ["no-new-privileges", "seccomp=" + json.dumps(json.loads(profile_json()), indent=2)],
    ):
        body = copy.deepcopy(CONTAINER)
        body["HostConfig"]["SecurityOpt"] = options
        assert container(body)["HostConfig"]["SecurityOpt"] == ["no-new-privileges", ours]


def test_a_clients_own_seccomp_choice_is_refused() -> None:
    looser = json.loads(profile_json())
    looser["defaultAction"] = "SCMP_ACT_ALLOW"
    for options in (
        ["no-new-privileges", "seccomp=unconfined"],
        ["no-new-privileges", "seccomp=" + json.dumps(looser)],
        ["no-new-privileges", "seccomp={}"],
        ["no-new-privileges", "seccomp=not json"],
        ["no-new-privileges", f"seccomp={profile_json()}", "seccomp=unconfined"],
        ["no-new-privileges", "seccomp:unconfined"],
        ["no-new-privileges", "apparmor=unconfined"],
        ["seccomp=unconfined"],
        [f"seccomp={profile_json()}"],
    ):
        body = copy.deepcopy(CONTAINER)
        body["HostConfig"]["SecurityOpt"] = options
        assert "SecurityOpt" in refusal(container, body), options


def request(method: str, path: str, **query: str) -> Request:
    return Request(method, (1, 41), path, query, 0)


def test_logs_are_never_served() -> None:
    for query in ({}, {"stdout": "1"}, {"stdout": "1", "stderr": "1", "tail": "all"}):
        assert refusal(plan, request("GET", "/containers/abc/logs", **query), POLICY) == NO_LOGS
    for logs in ("1", "true", "True"):
        attach = request("POST", "/containers/abc/attach", stream="1", stdout="1", logs=logs)
        assert refusal(plan, attach, POLICY) == NO_LOGS
    attach = request("POST", "/containers/abc/attach", stream="1", stdin="1", logs="0")
    assert plan(attach, POLICY).query == {"stream": "1", "stdin": "1"}


def filters(path: str, raw: str | None) -> list[str]:
    query = {} if raw is None else {"filters": raw}
    found = plan(request("GET", path, **query), POLICY)
    labels: list[str] = json.loads(found.query["filters"])["label"]
    return labels


@pytest.mark.parametrize("path", ["/containers/json", "/volumes"])
@pytest.mark.parametrize(
    "raw",
    [
        None,
        "{}",
        '{"label": []}',
        '{"label": ["cellmate.sandbox=1"]}',
        '{"label": ["cellmate.sandbox"]}',
        '{"label": ["cellmate.instance"]}',
        '{"label": {"cellmate.sandbox=1": true}}',
        f'{{"label": ["cellmate.sandbox=1", "cellmate.instance={INSTANCE}"]}}',
    ],
)
def test_lists_are_always_of_the_proxys_instance(path: str, raw: str | None) -> None:
    assert sorted(filters(path, raw)) == sorted(f"{k}={v}" for k, v in OURS.items())


@pytest.mark.parametrize("path", ["/containers/json", "/volumes"])
@pytest.mark.parametrize(
    "raw",
    [
        '{"label": ["cellmate.instance=victim"]}',
        '{"label": ["cellmate.sandbox=1", "cellmate.instance=victim"]}',
        f'{{"label": ["cellmate.instance={INSTANCE}", "cellmate.instance=victim"]}}',
        '{"label": ["cellmate.sandbox=0"]}',
        '{"label": {"cellmate.instance=victim": true}}',
        '{"label": ["com.docker.compose.project"]}',
        '{"name": ["cellmate-"]}',
        '{"id": ["abc"]}',
        '{"dangling": ["true"]}',
    ],
)
def test_lists_of_another_instance_or_by_other_filters_are_refused(path: str, raw: str) -> None:
    assert refusal(filters, path, raw)


def test_a_list_keeps_the_clients_further_labels() -> None:
    labels = filters("/containers/json", '{"label": ["cellmate.session=abc"]}')
    assert sorted(labels) == sorted(
        [*(f"{k}={v}" for k, v in OURS.items()), "cellmate.session=abc"]
    )


@pytest.mark.parametrize(
    "path", ["/mnt/data/sub", "/mnt/data/", "/mnt/data/.", "/tmp", "/", "/mnt", "/etc", ""]
)
def test_files_are_put_only_into_the_data_folder_itself(path: str) -> None:
    put = Request("PUT", (1, 41), "/containers/abc/archive", {"path": path}, 10240)
    assert refusal(plan, put, POLICY)
    put = Request("PUT", (1, 41), "/containers/abc/archive", {"path": "/mnt/data"}, 10240)
    assert plan(put, POLICY).body == "tar"


def test_the_command_takes_the_instance_it_serves() -> None:
    from dockerproxy.cli import parser, policy_from

    assert policy_from(parser().parse_args([])).instance == "default"
    assert policy_from(parser().parse_args(["--instance", "prod-eu"])).labels == {
        "cellmate.sandbox": "1",
        "cellmate.instance": "prod-eu",
    }
    for bad in ("", "two words", "a/b", "x" * 129, "é"):
        with pytest.raises(SystemExit, match="--instance must be"):
            policy_from(parser().parse_args(["--instance", bad]))


def test_the_command_takes_the_bots_network_setting_as_it_is() -> None:
    """Compose passes CELLMATE_NETWORK to --network-mode unchanged."""
    from dockerproxy.cli import parser, policy_from

    assert not policy_from(parser().parse_args([])).egress_network
    assert not policy_from(parser().parse_args(["--network-mode=off"])).egress_network
    assert policy_from(parser().parse_args(["--network-mode=allowlist"])).egress_network
    with pytest.raises(SystemExit):
        parser().parse_args(["--network-mode=on"])


def test_the_clients_volume_options_are_read_and_never_forwarded() -> None:
    """The executor repeats its volume's options in the mount; the proxy writes its own from
    the volume it checked, so a client's driver, options or labels never reach the engine."""
    body = copy.deepcopy(CONTAINER)
    body["HostConfig"]["Mounts"][0]["VolumeOptions"] = {
        "DriverConfig": {"Name": "local", "Options": {"type": "none", "o": "bind", "device": "/"}},
        "Labels": {"cellmate.instance": "victim"},
    }
    [mount] = container(body)["HostConfig"]["Mounts"]
    assert "VolumeOptions" not in mount
    assert mount["Type"] == "volume"
    assert mount["Target"] == "/mnt/data"
