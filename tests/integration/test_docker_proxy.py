"""The Docker API proxy against the real engine: the executor works through it under both
runtimes, and every class of request that could give a client more than a sandbox is refused,
or (where the engine is reached at all) leaves a container that is still a safe sandbox."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import docker
import pytest

from dockerproxy import DockerProxy, Policy
from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag
from executor.docker_backend import INSTANCE_LABEL, SANDBOX_LABEL
from tests.integration.conftest import TEST_INSTANCE, live_sandboxes
from tests.proxy.bodies import executor_bodies
from tests.storage.azurite import free_port

pytestmark = pytest.mark.docker
LABELS = {SANDBOX_LABEL: "1", INSTANCE_LABEL: TEST_INSTANCE}
SANDBOX_FILTER = quote(json.dumps({"label": [f"{SANDBOX_LABEL}=1"]}))


@pytest.fixture
def proxy_port() -> Iterator[int]:
    """The proxy on its own event loop in a thread, so that blocking clients can call it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = DockerProxy("/var/run/docker.sock", Policy())
    port = free_port()
    server = asyncio.run_coroutine_threadsafe(proxy.start("127.0.0.1", port), loop).result()
    yield port

    async def stop() -> None:
        server.close()
        await server.wait_closed()
        await proxy.close()

    asyncio.run_coroutine_threadsafe(stop(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


async def test_the_executor_works_through_the_proxy(
    proxy_port: int, runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{proxy_port}")
    limits = SandboxLimits(timeout_s=20, runtime=runtime)  # type: ignore[arg-type]
    async with Executor(
        default_tag(), limits=limits, instance=TEST_INSTANCE, pool=PoolSettings(size=1)
    ) as executor:
        session = executor.session("through-the-proxy")
        await session.put_files({"in.csv": b"a,b\n1,2\n"})
        result = await session.run(
            "import os, pandas as pd\nt = pd.read_csv('in.csv')\nt.to_csv('out.csv')\n"
            "print(t.b.sum(), os.getuid())"
        )
        assert result.status is Status.OK, result.message
        assert result.stdout == f"2 {limits.uid}\n"
        assert [f.path for f in result.files] == ["out.csv"]
        stopped = await session.run("import time\ntime.sleep(60)", timeout_s=1)
        assert stopped.status is Status.TIMEOUT
        again = await session.run("print(len(t))")
        assert again.stdout == "1\n"
        one_off = await executor.run_notebook(["x = 6 * 7", "x"])
        assert one_off.results[-1].text == "42"


@dataclass
class Answer:
    status: int
    body: bytes
    raw: bytes

    @property
    def message(self) -> str:
        try:
            return str(json.loads(self.body).get("message", ""))
        except ValueError:
            return self.body.decode(errors="replace")


def send(port: int, raw: bytes) -> Answer:
    """One connection: the bytes as given, then everything the proxy answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(raw)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return Answer(int(head.split(b" ")[1]), body, received)


def request(method: str, path: str, body: bytes | None = None, headers: str = "") -> bytes:
    sized = (
        "" if body is None else f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    return f"{method} {path} HTTP/1.1\r\nHost: docker\r\n{sized}{headers}\r\n".encode() + (
        body or b""
    )


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    selector = [f"{k}={v}" for k, v in LABELS.items()]
    for container in client.containers.list(all=True, filters={"label": selector}):
        container.remove(force=True, v=True)
    for volume in client.volumes.list(filters={"label": selector}):
        volume.remove(force=True)
    client.close()


@dataclass
class Sandbox:
    name: str
    container: dict[str, Any]
    volume: dict[str, Any]


def bodies(limits: SandboxLimits | None = None) -> Sandbox:
    name = f"cellmate-{uuid.uuid4().hex[:16]}"
    volume, container = executor_bodies(limits or SandboxLimits(), name)
    container["Image"] = default_tag()
    container["Labels"] = volume["Labels"] = LABELS
    return Sandbox(name, container, volume)


def create_volume(port: int, sandbox: Sandbox) -> None:
    made = send(port, request("POST", "/v1.41/volumes/create", json.dumps(sandbox.volume).encode()))
    assert made.status == 201, made.message


def assert_safe_sandbox(engine: docker.DockerClient, name: str) -> None:
    """What the engine made of a create that got through: still a hardened sandbox."""
    attrs = engine.api.inspect_container(name)
    host = attrs["HostConfig"]
    assert attrs["Config"]["User"] == Policy().user
    assert attrs["Config"]["Image"].startswith("cellmate-sandbox:")
    assert attrs["Config"]["Labels"][SANDBOX_LABEL] == "1"
    assert not attrs["Config"]["Entrypoint"] or attrs["Config"]["Entrypoint"][0].endswith("python")
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert not host["Binds"]
    assert not host.get("GroupAdd")
    assert not host.get("Sysctls")
    assert not host.get("Devices")
    assert not host.get("DeviceCgroupRules")
    assert host["MaskedPaths"]  # the engine's defaults, never emptied
    assert host["NetworkMode"] == "none"
    assert host["PidMode"] in ("", "private")
    assert host["IpcMode"] == "private"
    assert 0 < host["Memory"] == host["MemorySwap"]
    assert host["PidsLimit"] > 0
    assert not host.get("OomKillDisable")
    assert all("noexec" in o and "nosuid" in o for o in (host.get("Tmpfs") or {}).values())
    assert [(m["Type"], m["Target"]) for m in host["Mounts"]] == [("volume", "/mnt/data")]


def test_the_executors_bodies_make_a_hardened_sandbox(
    proxy_port: int, engine: docker.DockerClient
) -> None:
    sandbox = bodies()
    create_volume(proxy_port, sandbox)
    raw = json.dumps(sandbox.container).encode()
    made = send(proxy_port, request("POST", f"/v1.41/containers/create?name={sandbox.name}", raw))
    assert made.status == 201, made.message
    assert_safe_sandbox(engine, sandbox.name)
    volume = engine.api.inspect_volume(sandbox.name)
    assert volume["Options"] == {
        "type": "tmpfs",
        "device": "tmpfs",
        "o": "size=512m,uid=61000,gid=61000,mode=0700,nosuid,nodev",
    }


def _spliced(body: dict[str, Any], extra: str, host_extra: str = "") -> bytes:
    """The body with extra members written as raw JSON, so keys can repeat."""
    raw = json.dumps(body)
    if host_extra:
        raw = raw.replace('"HostConfig": {', '"HostConfig": {' + host_extra + ", ", 1)
    return (raw[:-1] + (", " + extra if extra else "") + "}").encode()


CREATE_ATTACKS = {
    "lower-case user": ('"user": "0"', ""),
    "upper-case hostconfig": ('"HOSTCONFIG": {"Privileged": true, "Binds": ["/:/host"]}', ""),
    "duplicate User, last wins": ('"User": "0:0"', ""),
    "lower-case privileged": ("", '"privileged": true'),
    "camel capAdd": ("", '"capAdd": ["ALL"]'),
    "lower networkmode": ("", '"networkmode": "host"'),
    "duplicate Binds": ("", '"binds": ["/:/host"]'),
    "user 00": ('"User": "00"', ""),
    "user +0:0": ('"User": "+0:0"', ""),
    "user 0000:1000": ('"User": "0000:1000"', ""),
    "GroupAdd": ("", '"GroupAdd": ["0", "docker", "shadow"]'),
    "seccomp unconfined": ("", '"SecurityOpt": ["seccomp=unconfined"]'),
    "apparmor unconfined": ("", '"SecurityOpt": ["apparmor=unconfined"]'),
    "no-new-privileges false": ("", '"SecurityOpt": ["no-new-privileges:false"]'),
    "MaskedPaths empty": ("", '"MaskedPaths": []'),
    "Memory 0": ("", '"Memory": 0'),
    "PidsLimit -1": ("", '"PidsLimit": -1'),
    "OomKillDisable": ("", '"OomKillDisable": true'),
    "Sysctls": ("", '"Sysctls": {"kernel.shm_rmid_forced": "0"}'),
    "DeviceCgroupRules": ("", '"DeviceCgroupRules": ["a *:* rwm"]'),
    "Tmpfs exec,suid": ("", '"Tmpfs": {"/tmp": "rw,exec,suid"}'),
    "NetworkMode bridge": ("", '"NetworkMode": "bridge"'),
    "bind mount": ("", '"Mounts": [{"Type": "bind", "Source": "/", "Target": "/mnt/data"}]'),
    "another image": ('"Image": "cellmate-base:bookworm"', ""),
    "entry point": ('"Entrypoint": ["/bin/sh", "-c", "id"]', ""),
}


@pytest.mark.parametrize("attack", sorted(CREATE_ATTACKS))
def test_create_attacks_never_make_an_unsafe_container(
    attack: str, proxy_port: int, engine: docker.DockerClient
) -> None:
    sandbox = bodies()
    create_volume(proxy_port, sandbox)
    extra, host_extra = CREATE_ATTACKS[attack]
    raw = _spliced(sandbox.container, extra, host_extra)
    made = send(proxy_port, request("POST", f"/v1.41/containers/create?name={sandbox.name}", raw))
    if made.status == 201:
        assert_safe_sandbox(engine, sandbox.name)
    else:
        assert made.status == 403, made.raw
        assert "cellmate docker-proxy" in made.message
        assert not engine.containers.list(all=True, filters={"name": sandbox.name})


VOLUME_ATTACKS = [
    '"driverOpts": {"type": "none", "o": "bind", "device": "/"}',
    '"DRIVEROPTS": {"type": "none", "o": "bind", "device": "/etc"}',
    '"DriverOpts": {"type": "none", "o": "bind", "device": "/"}',
    '"driver": "local", "Driver": "local"',
]


@pytest.mark.parametrize("extra", VOLUME_ATTACKS)
def test_volume_attacks_never_bind_a_host_folder(
    extra: str, proxy_port: int, engine: docker.DockerClient
) -> None:
    sandbox = bodies()
    raw = json.dumps(sandbox.volume)
    made = send(
        proxy_port,
        request("POST", "/v1.41/volumes/create", (raw[:-1] + ", " + extra + "}").encode()),
    )
    assert made.status == 403, made.raw
    assert not engine.volumes.list(filters={"name": sandbox.name})


@pytest.mark.parametrize("version", ["/v1.23", "/v1.24", "/v1.41", ""])
def test_start_never_takes_a_host_config(
    version: str, proxy_port: int, engine: docker.DockerClient
) -> None:
    sandbox = bodies()
    create_volume(proxy_port, sandbox)
    raw = json.dumps(sandbox.container).encode()
    made = send(proxy_port, request("POST", f"/v1.41/containers/create?name={sandbox.name}", raw))
    assert made.status == 201, made.message
    escalate = json.dumps({"Binds": ["/:/host"], "Privileged": True, "CapAdd": ["ALL"]})
    started = send(
        proxy_port, request("POST", f"{version}/containers/{sandbox.name}/start", escalate.encode())
    )
    assert started.status == 403
    assert not engine.containers.get(sandbox.name).attrs["State"]["Running"]
    plain = send(proxy_port, request("POST", f"/v1.41/containers/{sandbox.name}/start"))
    assert plain.status == 204, plain.message
    assert_safe_sandbox(engine, sandbox.name)


def test_an_upgrade_never_turns_into_an_unchecked_relay(
    proxy_port: int, engine: docker.DockerClient
) -> None:
    """Requests pipelined behind another, with or without an Upgrade header, never reach the
    engine: the proxy answers one request per connection."""
    smuggled_name = f"cellmate-{uuid.uuid4().hex[:16]}"
    smuggled = request(
        "POST",
        f"/v1.41/containers/create?name={smuggled_name}",
        json.dumps(
            {"Image": default_tag(), "User": "0", "HostConfig": {"Privileged": True}}
        ).encode(),
    )
    upgrade = "Connection: Upgrade\r\nUpgrade: tcp\r\n"
    first_requests = [
        request("GET", "/_ping", headers=upgrade),
        request("GET", "/v1.41/version", headers=upgrade),
        request("GET", "/_ping", headers="Connection: keep-alive\r\n"),
        request("GET", f"/v1.41/containers/json?filters={SANDBOX_FILTER}", headers=upgrade),
        request("POST", "/v1.41/containers/not-there/attach?stream=1&stdin=1", headers=upgrade),
    ]  # fmt: skip
    for first in first_requests:
        answer = send(proxy_port, first + smuggled)
        assert answer.raw.count(b"HTTP/1.1 ") == 1, answer.raw
        assert not engine.containers.list(all=True, filters={"name": smuggled_name})


def _refused(port: int, raw: bytes) -> str:
    answer = send(port, raw)
    assert answer.status == 403, answer.raw
    return answer.message


def test_everything_else_is_refused(proxy_port: int, engine: docker.DockerClient) -> None:
    outsider = engine.containers.create(default_tag(), command="true")  # not a sandbox
    outsider_volume = engine.volumes.create(f"outsider-{uuid.uuid4().hex[:8]}")
    try:
        for action in ("start", "kill", "pause", "attach?stream=1", "wait"):
            assert "not a Cellmate sandbox" in _refused(
                proxy_port, request("POST", f"/v1.41/containers/{outsider.id}/{action}")
            )
        for path in ("json", "archive?path=/mnt/data", "logs?stdout=1"):
            assert "not a Cellmate sandbox" in _refused(
                proxy_port, request("GET", f"/v1.41/containers/{outsider.name}/{path}")
            )
        assert "not a Cellmate sandbox" in _refused(
            proxy_port, request("DELETE", f"/v1.41/containers/{outsider.id}?force=1")
        )
        assert "not a Cellmate sandbox" in _refused(
            proxy_port, request("DELETE", f"/v1.41/volumes/{outsider_volume.name}")
        )
        sandbox = bodies()
        sandbox.container["HostConfig"]["Mounts"][0]["Source"] = outsider_volume.name
        assert "not a Cellmate sandbox" in _refused(
            proxy_port,
            request("POST", "/v1.41/containers/create", json.dumps(sandbox.container).encode()),
        )
        for method, path in [
            ("POST", f"/v1.41/containers/{outsider.id}/exec"),
            ("POST", "/v1.41/images/create?fromImage=alpine"),
            ("POST", "/v1.41/build"),
            ("GET", "/v1.41/networks"),
            ("GET", "/v1.41/containers/json?all=1"),
            ("GET", "/v1.41/volumes"),
            ("GET", "/v1.41/images/cellmate-base:bookworm/json"),
            ("POST", "/v1.41/containers/create/../../exec"),
            ("POST", "/v1.23/containers/create"),
            ("GET", "/v1.41/containers/x/archive?path=/etc/shadow"),
            ("GET", "/v1.41/containers/x/archive?path=/mnt/data/../../etc"),
            ("PUT", "/v1.41/containers/x/archive?path=/tmp&copyUIDGID=1"),
            ("POST", "/v1.41/containers/x/kill?signal=SIGSTOP&extra=1"),
            ("GET", "/v1.41/containers/x/json?size=1&size=1"),
            ("GET", "/v1.41/containers/%2e%2e/json"),
            ("POST", "/v1.41/swarm/init"),
            ("POST", "/v1.41/plugins/pull"),
        ]:
            assert _refused(proxy_port, request(method, path)), (method, path)
        for head in [
            b"POST /v1.41/volumes/create HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"POST /v1.41/volumes/create HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 9"
            b"\r\n\r\n{}",
            b"GET /_ping HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
            b"GET /_ping\x00 HTTP/1.1\r\n\r\n",
        ]:
            assert _refused(proxy_port, head)
    finally:
        outsider.remove(force=True)
        outsider_volume.remove(force=True)


def test_info_shows_only_what_the_executor_reads(proxy_port: int) -> None:
    answer = send(proxy_port, request("GET", "/v1.41/info"))
    assert answer.status == 200
    info = json.loads(answer.body)
    assert set(info) == {"ServerVersion", "Runtimes"}
    assert set(info["Runtimes"]) == {"runc", "runsc"}


async def test_leftover_sweep_and_lists_work_through_the_proxy(
    proxy_port: int, monkeypatch: pytest.MonkeyPatch, docker_client: docker.DockerClient
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{proxy_port}")
    executor = Executor(default_tag(), instance=TEST_INSTANCE, pool=PoolSettings(size=1))
    async with executor:
        await asyncio.sleep(0)
    assert live_sandboxes(docker_client) == []


def test_the_command_serves_through_a_tcp_upstream(proxy_port: int) -> None:
    """`cellmate docker-proxy` as a process, in front of another proxy reached over TCP."""
    port = free_port()
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("cellmate")),
            "docker-proxy",
            f"--listen=127.0.0.1:{port}",
            f"--upstream=127.0.0.1:{proxy_port}",
            "--runtime=runc",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                pinged = send(port, request("GET", "/_ping"))
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the proxy never listened"
                assert process.poll() is None, process.stderr and process.stderr.read()
                time.sleep(0.1)
        assert pinged.status == 200
        assert pinged.body == b"OK"
        info = json.loads(send(port, request("GET", "/v1.41/info")).body)
        assert set(info["Runtimes"]) == {"runc"}
        runsc = bodies(SandboxLimits(runtime="runsc")).container
        assert "runtime 'runsc' is not allowed" in _refused(
            port, request("POST", "/v1.41/containers/create", json.dumps(runsc).encode())
        )
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=30)
    assert "serving the Docker API for Cellmate sandboxes" in errors
    assert "refused a request: runtime 'runsc' is not allowed" in errors


@pytest.mark.parametrize(
    "argument", ["--sandbox-user=0:0", "--sandbox-user=root", "--sandbox-user=61000:0"]
)
def test_the_command_refuses_a_root_sandbox_user(argument: str) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("cellmate")), "docker-proxy", argument],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "--sandbox-user must be UID:GID, both not 0" in done.stderr
