"""What a Docker sandbox leaves on the engine and what its code may ask of the kernel: no
stored log (so no key and no user output on the engine's disk), a seccomp profile that
refuses io_uring and other calls a notebook never needs, file operations that survive a
runtime that cannot freeze, and never a volume other than the sandbox's own tmpfs one."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import docker
import docker.errors
import pytest
from docker.models.containers import ContainerCollection
from docker.models.volumes import VolumeCollection

from executor import Executor, SandboxLimits, Status, default_tag
from executor.archive import build_input_tar
from executor.docker_backend import DockerBackend
from executor.docker_sandbox import DockerSandbox
from executor.docker_specs import VolumeReplaced, check_volume, sandbox_specs
from executor.errors import FreezeFailed
from executor.notebook import output_caps
from executor.run import execute, new_collector, wait_ready
from executor.stdio import RunnerStream
from tests.integration.conftest import TEST_INSTANCE

pytestmark = pytest.mark.docker


@pytest.fixture
async def backend() -> AsyncIterator[DockerBackend]:
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    try:
        yield backend
    finally:
        await backend.close()


async def started(
    backend: DockerBackend, limits: SandboxLimits, tap: list[tuple[int, bytes]] | None = None
) -> DockerSandbox:
    sandbox = await backend.start(limits, None)
    if tap is not None:
        # Every frame the host reads from the attached stream, as the engine sent it.
        events: RunnerStream = sandbox._events
        read = events._read_frame

        async def recording() -> tuple[int, bytes] | None:
            frame = await read()
            if frame is not None:
                tap.append(frame)
            return frame

        events._read_frame = recording  # type: ignore[method-assign]
    await wait_ready(sandbox, 120)
    return sandbox


async def run(sandbox: DockerSandbox, limits: SandboxLimits, code: str) -> str:
    collector = new_collector(limits)
    outcome = await execute(sandbox, [code], limits, collector)
    assert outcome.status == "ok", (outcome.status, collector.stdout, sandbox.stderr_tail)
    return "".join(collector.stdout)


# --- where the key travels, and what the engine keeps -------------------------------------


async def test_neither_the_key_nor_the_output_is_stored_or_sent_on_stdout(
    backend: DockerBackend, runtime: str, docker_client: docker.DockerClient
) -> None:
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    secret = f"secret-{uuid.uuid4().hex}"
    tap: list[tuple[int, bytes]] = []
    sandbox = await started(backend, limits, tap)
    try:
        out = await run(sandbox, limits, f"print({secret!r})\nimport sys\nsys.stderr.write('e')")
        assert secret in out
        key = sandbox._events._key
        streamed = b"".join(payload for _, payload in tap)
        assert secret.encode() in streamed  # the tap saw the run's output go by...
        for form in (key.hex().encode(), key.hex().upper().encode(), key):
            assert form not in streamed  # ...but never the key, on stdout or stderr
        container = docker_client.containers.get(sandbox.id)
        assert container.attrs["HostConfig"]["LogConfig"] == {"Type": "none", "Config": {}}
        assert container.attrs["LogPath"] == ""
        with pytest.raises(docker.errors.APIError, match="does not support reading"):
            docker_client.api.logs(sandbox.id, stdout=True, stderr=True)
    finally:
        await sandbox.destroy()


async def test_a_line_that_offers_another_key_is_not_believed(
    backend: DockerBackend, runtime: str
) -> None:
    """Code that prints a `ready` with a key of its own, or a hello, changes nothing."""
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    sandbox = await started(backend, limits)
    try:
        forged = json.dumps({"type": "ready", "key": "ab" * 32})
        hello = json.dumps({"op": "hello", "key": "cd" * 32})
        code = (
            "import os\n"
            f"for line in ({forged!r}, {hello!r}):\n"
            "    os.write(1, line.encode() + b'\\n')\n"
            "print('after')"
        )
        assert "after" in await run(sandbox, limits, code)
        assert "2" in await run(sandbox, limits, "print(1 + 1)")
    finally:
        await sandbox.destroy()


# --- the seccomp profile ------------------------------------------------------------------

# x86-64 numbers, each with arguments the kernel would accept; ptrace last, as a success
# would leave the kernel traced.
REFUSED = {
    "io_uring_setup": "425, 8, params, 0, 0, 0, 0",
    "io_uring_enter": "426, 0, 0, 0, 0, 0, 0",
    "io_uring_register": "427, 0, 0, 0, 0, 0, 0",
    "userfaultfd": "323, 0, 0, 0, 0, 0, 0",
    "perf_event_open": "298, params, 0, -1, -1, 0, 0",
    "bpf": "321, 0, params, 48, 0, 0, 0",
    "kexec_load": "246, 0, 0, 0, 0, 0, 0",
    "keyctl": "250, 0, -3, 0, 0, 0, 0",
    "personality_uname26": "135, 0x20000, 0, 0, 0, 0, 0",
    "modify_ldt": "154, 0, params, 16, 0, 0, 0",
    "process_vm_readv": "310, os.getppid(), 0, 0, 0, 0, 0",
    "ptrace_traceme": "101, 0, 0, 0, 0, 0, 0",
}
GVISOR_HAS_NONE = {"io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "kexec_load"}
"""Calls gVisor's own kernel does not offer at all (it ignores the OCI seccomp profile)."""

PROBE = """
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(256)
found = {}
for name, args in CALLS.items():
    values = [ctypes.c_long(x) if isinstance(x, int) else x for x in eval(args)]
    ctypes.set_errno(0)
    result = libc.syscall(*values)
    found[name] = [result, errno.errorcode.get(ctypes.get_errno(), '')]
print(json.dumps(found))
"""


async def test_calls_a_notebook_never_needs_are_refused(executor: Executor, runtime: str) -> None:
    code = PROBE.replace("CALLS", repr({k: f"({v},)" for k, v in REFUSED.items()}))
    result = await executor.run_notebook(code)
    assert result.status is Status.OK, (result.message, result.error)
    found = json.loads(result.stdout)
    assert list(found) == list(REFUSED)
    for name, (value, error) in found.items():
        if runtime == "runc":
            # The profile answers: EPERM, or ENOSYS where a library should fall back.
            assert (value, error) in ((-1, "EPERM"), (-1, "ENOSYS")), (name, value, error)
        elif name in GVISOR_HAS_NONE:
            assert value == -1, (name, value, error)


async def test_ordinary_notebook_work_runs_under_the_profile(executor: Executor) -> None:
    code = (
        "import numpy as np, pandas as pd, matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import subprocess, threading, multiprocessing, concurrent.futures as cf\n"
        "frame = pd.DataFrame({'x': np.arange(1000)})\n"
        "print(int(frame.x.sum()))\n"
        "plt.plot(frame.x); plt.savefig('chart.png')\n"
        "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "done = []\n"
        "threads = [threading.Thread(target=done.append, args=(i,)) for i in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(len(done))\n"
        "with cf.ProcessPoolExecutor(2) as pool:\n"
        "    print(sum(pool.map(abs, range(-5, 5))))\n"
        "import os, mmap, tempfile, time, socket\n"
        "with tempfile.TemporaryFile() as f:\n"
        "    f.write(b'x' * 4096); f.flush(); print(len(mmap.mmap(f.fileno(), 4096)))\n"
        "a, b = socket.socketpair(); a.send(b'ok'); print(b.recv(2).decode())\n"
        "print(os.uname().sysname, time.monotonic() > 0)"
    )
    result = await executor.run_notebook(code, timeout_s=120)
    assert result.status is Status.OK, (result.message, result.stdout, result.error)
    assert result.stdout.split("\n")[:7] == [
        "499500",
        "child",
        "8",
        "25",
        "4096",
        "ok",
        "Linux True",
    ]
    assert [f.path for f in result.files] == ["chart.png"]


# --- freezing for file operations ---------------------------------------------------------


class Refusing:
    """Makes a real container's pause fail `times` times (as runc under load does)."""

    def __init__(self, sandbox: DockerSandbox, times: int) -> None:
        self.container: Any = sandbox._container
        self.pause = self.container.pause
        self.times = times
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.times:
            self.times -= 1
            raise docker.errors.APIError(
                "500 Server Error", explanation="OCI runtime pause failed: unable to freeze"
            )
        self.pause()


async def test_file_operations_outlast_a_runtime_that_cannot_freeze(
    backend: DockerBackend, runtime: str, docker_client: docker.DockerClient
) -> None:
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    sandbox = await started(backend, limits)
    container: Any = sandbox._container
    try:
        # Refused twice, then frozen: the write happens, and the sandbox is thawed after.
        # (On a loaded machine runc itself may refuse a further try: that is retried too.)
        refusing = Refusing(sandbox, times=2)
        container.pause = refusing
        await sandbox.put_files(build_input_tar({"a.txt": b"first"}, 5, 1000))
        assert refusing.calls >= 3
        assert docker_client.api.inspect_container(sandbox.id)["State"]["Paused"] is False
        # Refused every time: that one write and read are refused, by name; nothing else.
        container.pause = Refusing(sandbox, times=1000)
        with pytest.raises(FreezeFailed, match="too busy to write files into it"):
            await sandbox.put_files(build_input_tar({"b.txt": b"second"}, 5, 1000))
        with pytest.raises(FreezeFailed, match="too busy to read its files"):
            await sandbox.get_files(output_caps(limits))
        state = docker_client.api.inspect_container(sandbox.id)["State"]
        assert state["Running"] is True
        assert state["Paused"] is False
        # The session goes on, with its files, once the runtime can freeze again.
        out = await run(
            sandbox, limits, "import os\nprint(os.path.exists('a.txt'), os.path.exists('b.txt'))"
        )
        assert out == "True False\n"
        container.pause = refusing.pause
        found = await sandbox.get_files(output_caps(limits))
        assert [(f.path, f.content) for f in found.files] == [("a.txt", b"first")]
    finally:
        await sandbox.destroy()


# --- the sandbox's volume -----------------------------------------------------------------


def plain_sandbox_volumes(client: docker.DockerClient) -> list[str]:
    return [
        str(v.name)
        for v in client.volumes.list()
        if str(v.name).startswith("cellmate-") and not v.attrs.get("Labels")
    ]


async def test_a_sandbox_never_starts_on_a_volume_that_is_not_its_own(
    backend: DockerBackend,
    runtime: str,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep that removes a new sandbox's volume before its container is made: the mount
    repeats the volume's driver, options and labels, so the engine makes the same capped,
    labelled tmpfs volume again instead of a plain one on its own disk."""
    before = set(plain_sandbox_volumes(docker_client))
    create = VolumeCollection.create
    swept: list[str] = []

    def create_then_sweep(self: VolumeCollection, *args: Any, **kwargs: Any) -> Any:
        made = create(self, *args, **kwargs)
        made.remove(force=True)
        swept.append(str(made.name))
        return made

    monkeypatch.setattr(VolumeCollection, "create", create_then_sweep)
    limits = SandboxLimits(runtime=runtime, data_mb=64)  # type: ignore[arg-type]
    sandbox = await started(backend, limits)
    try:
        assert swept == [sandbox.volume_name]
        volume = docker_client.api.inspect_volume(sandbox.volume_name)
        assert volume["Options"]["type"] == "tmpfs"
        assert volume["Labels"]["cellmate.instance"] == TEST_INSTANCE
        size = await run(
            sandbox,
            limits,
            "import os\ns = os.statvfs('/mnt/data')\nprint(s.f_blocks * s.f_frsize)",
        )
        assert int(size) == 64 * 1024 * 1024
    finally:
        await sandbox.destroy()
    assert set(plain_sandbox_volumes(docker_client)) <= before


def test_a_plain_volume_in_a_sandboxs_place_is_noticed(
    docker_client: docker.DockerClient,
) -> None:
    """Where an engine made a plain volume anyway (one that ignores a mount's volume
    options), the start's check refuses it by name."""
    name = f"cellmate-{uuid.uuid4().hex[:16]}"
    docker_client.volumes.create(name)  # what such an engine makes: no labels, no options
    try:
        expected, _ = sandbox_specs(default_tag(), name, SandboxLimits(), {"a": "b"})
        with pytest.raises(VolumeReplaced, match="engine put a plain volume in its place"):
            check_volume(docker_client, expected)
    finally:
        docker_client.api.remove_volume(name)


async def test_the_sweep_removes_plain_leftover_volumes_and_nothing_else(
    backend: DockerBackend, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def name() -> str:
        return f"cellmate-{uuid.uuid4().hex[:16]}"

    leftover = docker_client.volumes.create(name())  # what the engine makes: no labels
    in_use = docker_client.volumes.create(name())
    holder = docker_client.containers.create(
        default_tag(),
        name=f"dockerfix-holder-{uuid.uuid4().hex[:8]}",
        network_disabled=True,
        mounts=[docker.types.Mount("/x", str(in_use.name), type="volume")],
    )
    someone_elses = [
        docker_client.volumes.create(
            name(), labels={"cellmate.sandbox": "1", "cellmate.instance": "another"}
        ),
        docker_client.volumes.create(f"cellmate-{uuid.uuid4().hex[:15]}"),  # not our pattern
        docker_client.volumes.create(f"other-{uuid.uuid4().hex[:16]}"),
        docker_client.volumes.create(
            name(), driver_opts={"type": "tmpfs", "device": "tmpfs", "o": "size=1m"}
        ),
    ]
    ours = {str(leftover.name)}
    # The sweep's choices are checked on the engine's real listing; it really removes only
    # the volume this test made (never one another test run may still be looking at).
    asked: list[str] = []
    remove = docker_client.api.remove_volume

    def remove_only_ours(volume: str, force: bool = False) -> None:
        asked.append(volume)
        if volume in ours:
            remove(volume, force)

    try:
        client = await backend.client()
        monkeypatch.setattr(client.api, "remove_volume", remove_only_ours)
        await backend.remove_leftovers()
        assert str(leftover.name) in asked
        for kept in [in_use, *someone_elses]:
            assert str(kept.name) not in asked
            docker_client.volumes.get(str(kept.name))  # still there
        with pytest.raises(docker.errors.NotFound):
            docker_client.volumes.get(str(leftover.name))
    finally:
        holder.remove(force=True)
        for volume in [in_use, *someone_elses]:
            volume.remove(force=True)
        if str(leftover.name) not in asked:
            leftover.remove(force=True)


async def test_a_start_cancelled_while_the_engine_creates_leaves_nothing(
    backend: DockerBackend, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool that closes cancels its starts; the engine call goes on in its thread, and
    what it makes after the cancel (container, volume) is removed once it is done."""
    before = set(plain_sandbox_volumes(docker_client))
    create = ContainerCollection.create
    entered, release = threading.Event(), threading.Event()
    made: list[str] = []

    def slow_create(self: ContainerCollection, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(60)
        container = create(self, *args, **kwargs)
        made.append(str(container.name))
        return container

    monkeypatch.setattr(ContainerCollection, "create", slow_create)
    starting = asyncio.create_task(backend.start(SandboxLimits(), None))
    assert await asyncio.to_thread(entered.wait, 60)
    starting.cancel()
    await asyncio.sleep(0)  # the cancel reaches the start while the engine call waits
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert len(made) == 1
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(made[0])
    with pytest.raises(docker.errors.NotFound):
        docker_client.volumes.get(made[0])
    assert set(plain_sandbox_volumes(docker_client)) <= before
