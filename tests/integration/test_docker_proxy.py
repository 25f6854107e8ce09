"""The Docker API proxy against the real engine: the executor works through it under both
runtimes, and every class of request that could give a client more than a sandbox is refused,
or (where the engine is reached at all) leaves a container that is still a safe sandbox."""

from __future__ import annotations

import asyncio
import bz2
import gzip
import io
import json
import socket
import subprocess
import sys
import tarfile
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

from bench.standins.ports import free_port
from dockerproxy import DockerProxy, Policy
from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag
from executor.docker_sandbox import remove_sandbox
from executor.docker_specs import INSTANCE_LABEL, SANDBOX_LABEL
from executor.seccomp import profile_json
from tests.proxy.bodies import executor_bodies
from tests.support.sandboxes import TEST_INSTANCE, live_sandboxes

pytestmark = pytest.mark.docker
LABELS = {SANDBOX_LABEL: "1", INSTANCE_LABEL: TEST_INSTANCE}
MiB = 1024 * 1024
SANDBOX_FILTER = quote(json.dumps({"label": [f"{SANDBOX_LABEL}=1"]}))


@pytest.fixture
def proxy_port() -> Iterator[int]:
    """The proxy on its own event loop in a thread, so that blocking clients can call it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = DockerProxy("/var/run/docker.sock", Policy(instance=TEST_INSTANCE))
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


IO_URING = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fd = libc.syscall(425, 4, ctypes.create_string_buffer(120))\n"  # io_uring_setup
    "print(fd, ctypes.get_errno())"
)


async def test_the_executor_works_through_the_proxy(
    proxy_port: int,
    runtime: str,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
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
        # The proxy's seccomp profile: io_uring is not there (ENOSYS), under runc as well.
        uring = await session.run(IO_URING)
        assert uring.stdout == "-1 38\n", uring.stdout + uring.stderr
        # What a sandbox prints is nowhere but in the answer: no log, and none served.
        shown = await session.run("print('only-for-the-user')")
        assert shown.stdout == "only-for-the-user\n"
        ours = docker_client.containers.list(
            filters={"label": [f"{INSTANCE_LABEL}={TEST_INSTANCE}"]}
        )
        assert ours
        for container in ours:
            assert container.attrs["HostConfig"]["LogConfig"] == {"Type": "none", "Config": {}}
            with pytest.raises(docker.errors.APIError, match="does not support reading"):
                container.logs()
            for ref in (container.id, container.name):
                answer = send(
                    proxy_port, request("GET", f"/v1.41/containers/{ref}/logs?stdout=1&stderr=1")
                )
                assert answer.status == 403
                assert "sandbox logs are not served" in answer.message
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
    assert attrs["Config"]["Labels"][INSTANCE_LABEL] == TEST_INSTANCE
    assert not attrs["Config"]["Entrypoint"] or attrs["Config"]["Entrypoint"][0].endswith("python")
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges", f"seccomp={profile_json()}"]
    assert host["LogConfig"] == {"Type": "none", "Config": {}}
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
        for path in ("json", "archive?path=/mnt/data"):
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
            ("GET", "/v1.41/containers/json?filters=%7B%22name%22%3A%5B%22a%22%5D%7D"),
            ("GET", "/v1.41/volumes?filters=%7B%22dangling%22%3A%5B%22true%22%5D%7D"),
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
            f"--instance={TEST_INSTANCE}",
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


@dataclass
class Victim:
    """Another bot instance's sandbox, made on the engine directly."""

    id: str
    name: str


VICTIM_INSTANCE = f"{TEST_INSTANCE}-victim"


@pytest.fixture
def victim(engine: docker.DockerClient, runtime: str) -> Iterator[Victim]:
    labels = {SANDBOX_LABEL: "1", INSTANCE_LABEL: VICTIM_INSTANCE}
    name = f"cellmate-{uuid.uuid4().hex[:16]}"
    volume = engine.volumes.create(
        name,
        driver="local",
        driver_opts={"type": "tmpfs", "device": "tmpfs", "o": "size=16m,uid=61000,gid=61000"},
        labels=labels,
    )
    container = engine.containers.create(
        default_tag(),
        name=name,
        entrypoint=["sleep", "600"],
        labels=labels,
        user="61000:61000",
        runtime=runtime,
        network_mode="none",
        stdin_open=True,
        mounts=[docker.types.Mount("/mnt/data", name, type="volume")],
    )
    try:
        container.start()
        yield Victim(str(container.id), name)
    finally:
        container.remove(force=True, v=True)
        volume.remove(force=True)


def plain_tar(*files: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def put(port: int, ref: str, body: bytes, path: str = "/mnt/data") -> Answer:
    head = (
        f"PUT /v1.41/containers/{ref}/archive?path={quote(path)} HTTP/1.1\r\nHost: docker\r\n"
        f"Content-Type: application/x-tar\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return send(port, head.encode() + body)


def test_another_instances_sandbox_is_out_of_reach(
    proxy_port: int, engine: docker.DockerClient, victim: Victim
) -> None:
    """By id, name or id prefix: nothing of another instance's sandbox can be read, written,
    attached to, stopped or removed, and lists never show it."""
    refs = [victim.id, victim.name, victim.id[:12], victim.id[:6]]
    actions = [
        ("GET", "json"),
        ("POST", "start"),
        ("POST", "kill"),
        ("POST", "kill?signal=SIGKILL"),
        ("POST", "pause"),
        ("POST", "unpause"),
        ("POST", "wait"),
        ("POST", "attach?stream=1&stdin=1&stdout=1&stderr=1"),
        ("GET", "archive?path=/mnt/data"),
        ("HEAD", "archive?path=/mnt/data"),
    ]
    for ref in refs:
        for method, action in actions:
            answer = send(proxy_port, request(method, f"/v1.41/containers/{ref}/{action}"))
            assert answer.status == 403, (ref, action, answer.raw[:300])
            assert answer.raw.count(b"HTTP/1.1 ") == 1  # never upgraded to a stream
            if method != "HEAD":
                assert "not a Cellmate sandbox of this instance" in answer.message, answer.message
        for delete in (f"/v1.41/containers/{ref}?force=1&v=1", f"/v1.41/containers/{ref}"):
            assert "not a Cellmate sandbox of this instance" in _refused(
                proxy_port, request("DELETE", delete)
            )
        assert (
            "not a Cellmate sandbox of this instance"
            in put(proxy_port, ref, plain_tar(("planted.py", b"x"))).message
        )
        assert "not served" in _refused(
            proxy_port, request("GET", f"/v1.41/containers/{ref}/logs?stdout=1")
        )
    for method, path in (("GET", f"/v1.41/volumes/{victim.name}"),
                         ("DELETE", f"/v1.41/volumes/{victim.name}?force=1"),
                         ("DELETE", f"/v1.41/volumes/{victim.name}")):  # fmt: skip
        assert "not a Cellmate sandbox of this instance" in _refused(
            proxy_port, request(method, path)
        )
    # A sandbox of ours on the victim's volume, or one labelled as the victim's.
    sandbox = bodies()
    sandbox.container["HostConfig"]["Mounts"][0]["Source"] = victim.name
    assert "not a Cellmate sandbox of this instance" in _refused(
        proxy_port,
        request("POST", "/v1.41/containers/create", json.dumps(sandbox.container).encode()),
    )
    for labels in ({SANDBOX_LABEL: "1", INSTANCE_LABEL: VICTIM_INSTANCE},):
        own = bodies()
        own.volume["Labels"] = own.container["Labels"] = labels
        assert "this proxy serves the instance" in _refused(
            proxy_port, request("POST", "/v1.41/volumes/create", json.dumps(own.volume).encode())
        )
        assert "this proxy serves the instance" in _refused(
            proxy_port,
            request(
                "POST",
                f"/v1.41/containers/create?name={own.name}",
                json.dumps(own.container).encode(),
            ),
        )
        assert not engine.containers.list(all=True, filters={"name": own.name})
    # Lists: whatever the filter, only this instance's sandboxes (here: none), or refused.
    choices: list[dict[str, list[str]] | None] = [
        None,
        {"label": [f"{SANDBOX_LABEL}=1"]},
        {"label": []},
    ]
    victims = {"label": [f"{INSTANCE_LABEL}={VICTIM_INSTANCE}"]}
    for base in ("/v1.41/containers/json?all=1&", "/v1.41/volumes?"):
        for filters in choices:
            query = "" if filters is None else f"filters={quote(json.dumps(filters))}"
            listed = send(proxy_port, request("GET", (base + query).rstrip("?&")))
            assert listed.status == 200, listed.raw
            assert victim.id not in listed.body.decode()
            assert victim.name not in listed.body.decode()
        assert "this proxy lists only its own sandboxes" in _refused(
            proxy_port, request("GET", f"{base}filters={quote(json.dumps(victims))}")
        )
    still = engine.containers.get(victim.id)
    assert still.status == "running"
    assert engine.volumes.get(victim.name)


def test_lists_show_this_instances_sandboxes(proxy_port: int, engine: docker.DockerClient) -> None:
    sandbox = bodies()
    create_volume(proxy_port, sandbox)
    raw = json.dumps(sandbox.container).encode()
    made = send(proxy_port, request("POST", f"/v1.41/containers/create?name={sandbox.name}", raw))
    assert made.status == 201, made.message
    for path in (
        "/v1.41/containers/json?all=1",
        f"/v1.41/containers/json?all=1&filters={SANDBOX_FILTER}",
    ):
        listed = json.loads(send(proxy_port, request("GET", path)).body)
        assert [c["Names"] for c in listed] == [[f"/{sandbox.name}"]]
    volumes = json.loads(send(proxy_port, request("GET", "/v1.41/volumes")).body)["Volumes"]
    assert [v["Name"] for v in volumes] == [sandbox.name]


def test_a_sandbox_already_gone_is_missing_as_on_the_engine(
    proxy_port: int, engine: docker.DockerClient
) -> None:
    """A removal that raced another one finds nothing: 404, as from the engine, so that the
    executor counts it as done (the sweep and a sandbox's own removal run concurrently)."""
    sandbox = bodies()
    create_volume(proxy_port, sandbox)
    raw = json.dumps(sandbox.container).encode()
    made = send(proxy_port, request("POST", f"/v1.41/containers/create?name={sandbox.name}", raw))
    assert made.status == 201, made.message
    through = docker.DockerClient(base_url=f"tcp://127.0.0.1:{proxy_port}")
    try:
        remove_sandbox(engine, sandbox.name, sandbox.name)  # a sweep got there first
        remove_sandbox(through, sandbox.name, sandbox.name)
    finally:
        through.close()
    for method, path in (
        ("GET", f"/v1.41/containers/{sandbox.name}/json"),
        ("DELETE", f"/v1.41/containers/{sandbox.name}?force=1&v=1"),
        ("GET", f"/v1.41/volumes/{sandbox.name}"),
        ("DELETE", f"/v1.41/volumes/{sandbox.name}?force=1"),
    ):
        answer = send(proxy_port, request(method, path))
        assert answer.status == 404, (method, path, answer.message)
        assert "no such" in answer.message


TAR_ATTACKS = {
    "link to / then a file through it": (
        [("l", tarfile.SYMTYPE, "/", 0o777), ("l/etc/x", tarfile.REGTYPE, "", 0o4755)],
        "a symbolic link",
    ),
    "link to .. then a file through it": (
        [("l", tarfile.SYMTYPE, "../..", 0o777), ("l/etc/x", tarfile.REGTYPE, "", 0o755)],
        "a symbolic link",
    ),
    "hard link to /etc/passwd": ([("p", tarfile.LNKTYPE, "/etc/passwd", 0o644)], "a hard link"),
    "file under a folder it does not hold": (
        [("l/etc/x", tarfile.REGTYPE, "", 0o755)],
        "before its folder",
    ),
    "absolute name": ([("/etc/x", tarfile.REGTYPE, "", 0o755)], "absolute"),
    "name up out of the folder": ([("../../../etc/x", tarfile.REGTYPE, "", 0o755)], "goes up"),
    "device node": ([("dev", tarfile.CHRTYPE, "", 0o666)], "a character device"),
    "fifo": ([("fifo", tarfile.FIFOTYPE, "", 0o666)], "a FIFO"),
}


def attack_tar(members: list[tuple[str, bytes, str, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(_info("before.txt", tarfile.REGTYPE, "", 0o644, 6), io.BytesIO(b"before"))
        for name, kind, link, mode in members:
            data = b"#!/bin/sh\nid\n" if kind == tarfile.REGTYPE else b""
            tar.addfile(_info(name, kind, link, mode, len(data)), io.BytesIO(data))
    return buffer.getvalue()


def _info(name: str, kind: bytes, link: str, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, link, mode, size
    info.uid = info.gid = 0
    return info


LIST_DATA = (
    "import os, stat\n"
    "for name in sorted(os.listdir('.')):\n"
    "    s = os.lstat(name)\n"
    "    print(name, oct(stat.S_IMODE(s.st_mode)), s.st_uid, stat.S_ISREG(s.st_mode))\n"
    "print('etc/x' if os.path.exists('/etc/x') else 'no /etc/x')"
)


async def test_tar_attacks_never_land(
    proxy_port: int,
    runtime: str,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
) -> None:
    """Through the proxy into a live sandbox: links, devices, names out of the folder, set-id
    modes, more than the volume holds, compressed streams; what lands is plain files."""
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{proxy_port}")
    limits = SandboxLimits(timeout_s=20, runtime=runtime, data_mb=16)  # type: ignore[arg-type]
    async with Executor(
        default_tag(), limits=limits, instance=TEST_INSTANCE, pool=PoolSettings(size=0)
    ) as executor:
        session = executor.session("tar-attacks")
        await session.put_files({"in.csv": b"a\n1\n"})
        (container,) = docker_client.containers.list(
            filters={"label": [f"{INSTANCE_LABEL}={TEST_INSTANCE}"]}
        )
        sandbox_id = str(container.id)
        for attack, (members, reason) in TAR_ATTACKS.items():
            answer = put(proxy_port, sandbox_id, attack_tar(members))
            assert answer.status == 403, (attack, answer.raw)
            assert reason in answer.message, (attack, answer.message)
        setuid = attack_tar([("run.sh", tarfile.REGTYPE, "", 0o6755)])
        assert put(proxy_port, sandbox_id, setuid).status == 200
        big = plain_tar(("big.bin", bytes(17 * MiB)))
        assert "at most" in put(proxy_port, sandbox_id, big).message
        for compress, kind in ((gzip.compress, "gzip"), (bz2.compress, "bzip2")):
            packed = compress(plain_tar(("z.txt", b"z")))
            assert f"{kind}-compressed" in put(proxy_port, sandbox_id, packed).message
        deeper = put(proxy_port, sandbox_id, plain_tar(("y.txt", b"y")), "/mnt/data/sub")
        assert "only into /mnt/data itself" in deeper.message
        for path in ("/etc/x", "/mnt/data/l", "/mnt/data/dev", "/mnt/data/fifo"):
            with pytest.raises(docker.errors.NotFound):
                container.get_archive(path)
        listed = await session.run(LIST_DATA)
        assert listed.status is Status.OK, listed.message
        assert listed.stdout.splitlines() == [
            "before.txt 0o644 61000 True",
            "in.csv 0o644 61000 True",
            "run.sh 0o755 61000 True",
            "no /etc/x",
        ]
