"""What user code can do to the host's view of a run, with real containers under runc and
runsc: files from outside /mnt/data, forged events, processes left running, floods of
results, and the user the code runs as.
"""

from __future__ import annotations

import dataclasses
import json

import docker
import pytest

from executor import Executor, SandboxLimits, Status, default_tag
from tests.integration.conftest import NO_POOL, TEST_INSTANCE

pytestmark = pytest.mark.docker

# A kernel thread (threads are the kernel's own and outlive the run) that keeps turning the
# folder `box` into a link to /etc and back, while the host reads the run's files.
SWAPPER = """
import os, threading, time
def _swap(target):
    while True:
        try:
            os.rename('box', 'box.real')
            os.symlink(target, 'box')
            time.sleep(0.0005)
            os.unlink('box')
            os.rename('box.real', 'box')
            time.sleep(0.0005)
        except OSError:
            pass
threading.Thread(target=_swap, args=('/etc',), daemon=True).start()
"""

# Decoys named like the files in /etc, rewritten (and so changed) on every run.
DECOYS = """
import os, time
for _ in range(10_000):
    try:
        os.makedirs('box', exist_ok=True)
        for name in ('shadow', 'passwd', 'hostname'):
            with open(f'box/{name}', 'w') as decoy:
                decoy.write('decoy')
        break
    except OSError:
        time.sleep(0.001)
"""

OUTSIDE = (b"root:", b"sandbox", b"daemon:")


def _leaked(content: bytes) -> bool:
    return any(marker in content for marker in OUTSIDE)


async def test_files_never_come_from_outside_mnt_data_while_a_folder_is_swapped(
    executor: Executor,
) -> None:
    # The swapper thread and the decoys' retry loop share the kernel: on a loaded machine a
    # run of them takes longer than the suite's usual limit, which is not what this tests.
    executor.sessions.limits = dataclasses.replace(executor.sessions.limits, timeout_s=90)
    session = executor.session("swap")
    first = await session.run(["import os\nos.makedirs('box')", DECOYS, SWAPPER])
    assert first.status is Status.OK
    fetched = 0
    for _ in range(15):
        result = await session.run(DECOYS)
        assert result.status is Status.OK
        for file in result.files:
            fetched += 1
            assert not _leaked(file.content), f"{file.path} came from outside /mnt/data"
        for name in ("shadow", "passwd", "hostname"):
            for _ in range(3):
                content = await session.get_file(f"box/{name}")
                if content is not None:
                    fetched += 1
                    assert not _leaked(content), f"box/{name} came from outside /mnt/data"
        for path, _ in await session.list_files():
            assert path.startswith("box"), path
    assert fetched  # the decoys themselves did come back, at least now and then


async def test_notebook_files_never_come_from_outside_mnt_data(executor: Executor) -> None:
    for _ in range(4):
        result = await executor.run_notebook([DECOYS, SWAPPER, "import time\ntime.sleep(0.5)"])
        assert result.status is Status.OK
        for file in result.files:
            assert not _leaked(file.content), f"{file.path} came from outside /mnt/data"


# User code hunts for the run's id in the runner's memory (every way a process of the same
# user could read it), then writes forged `done` events for every candidate into any pipe
# of any other process in the sandbox that it can open, and keeps running.
FORGER = r"""
import ctypes, json, os, re
runner = os.getppid()
found, probes = set(), {}
pattern = re.compile(rb'"id": "([0-9a-f]{12,64})"')

def probe(name, read):
    try:
        data = read()
    except Exception as exc:
        probes[name] = 'refused: ' + type(exc).__name__
        return
    probes[name] = 'read'
    found.update(m.decode() for m in pattern.findall(data))

def memory():
    chunks = []
    with open(f'/proc/{runner}/maps') as maps, open(f'/proc/{runner}/mem', 'rb', 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split('-'))
            if perms.startswith('rw') and end - start < 256 * 1024 * 1024:
                try:
                    mem.seek(start)
                    chunks.append(mem.read(end - start))
                except OSError:
                    pass
    if not chunks:
        raise PermissionError('nothing readable')
    return b''.join(chunks)

probe('mem', memory)
probe('environ', lambda: open(f'/proc/{runner}/environ', 'rb').read())
probe('fd', lambda: str(os.listdir(f'/proc/{runner}/fd')).encode())

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

def attach():
    if libc.ptrace(16, runner, None, None) != 0:  # PTRACE_ATTACH
        raise PermissionError(os.strerror(ctypes.get_errno()))
    os.waitpid(runner, 0x40000000)  # __WALL
    libc.ptrace(17, runner, None, None)  # PTRACE_DETACH
    return b''
probe('ptrace', attach)

class IoVec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]

def vm_readv():
    chunks = []
    with open(f'/proc/{runner}/maps') as maps:
        regions = [l.split()[:2] for l in maps]
    for span, perms in regions:
        start, end = (int(x, 16) for x in span.split('-'))
        if not perms.startswith('rw') or end - start > 256 * 1024 * 1024:
            continue
        buffer = ctypes.create_string_buffer(end - start)
        local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), end - start)
        remote = IoVec(start, end - start)
        got = libc.process_vm_readv(runner, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got > 0:
            chunks.append(buffer.raw[:got])
    if not chunks:
        raise PermissionError(os.strerror(ctypes.get_errno()) or 'nothing readable')
    return b''.join(chunks)
probe('process_vm_readv', vm_readv)

forged = 0
events = b''.join(
    (json.dumps({'type': 'done', 'id': run_id, 'status': 'ok', 'changed': []}) + '\n').encode()
    for run_id in sorted(found)
) or (json.dumps({'type': 'done', 'id': 'x' * 12, 'status': 'ok'}) + '\n').encode()
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
    except OSError:
        continue
    for fd in fds:
        try:
            if not os.readlink(f'/proc/{pid}/fd/{fd}').startswith(('pipe:', 'host:')):
                continue
            out = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)
            os.write(out, events)
            os.close(out)
            forged += 1
        except OSError:
            pass
print(json.dumps({'probes': probes, 'candidates': len(found), 'forged': forged}), flush=True)
"""


async def test_the_runner_cannot_be_read_and_its_events_cannot_be_forged(
    executor: Executor, runtime: str
) -> None:
    # Session mode: the same runner has already handled a run, so its memory holds ids.
    session = executor.session("forger")
    await session.run("x = 1")
    result = await session.run([FORGER, "import time\ntime.sleep(2)\nprint('finished')"])
    assert result.status is Status.OK, result.message
    # The run was not reported finished before it had, whatever was written where.
    lines = result.stdout.splitlines()
    assert lines[-1:] == ["finished"], result.stdout
    report = json.loads(lines[0])
    # No way into the runner's memory; under runc not into its environment or descriptors
    # either (gVisor lets the same user open them, which is why events are sealed).
    probes = report["probes"]
    memory = ("mem", "ptrace", "process_vm_readv")
    assert all(probes[name].startswith("refused") for name in memory), probes
    if runtime == "runc":
        assert all(outcome.startswith("refused") for outcome in probes.values()), probes
    assert report["candidates"] == 0
    assert (await session.run("x + 1")).results[-1].text == "2"


# Everything but the runner and the kernel, as the next run sees it (zombies have no code
# left to run; they are listed separately).
PROCESSES = r"""
import json, os
me, runner = os.getpid(), os.getppid()
alive, zombies = [], []
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) in (me, runner):
        continue
    try:
        stat = open(f'/proc/{pid}/stat').read()
        cmdline = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode()
    except OSError:
        continue
    state = stat.rsplit(')', 1)[1].split()[0]
    entry = f'{pid} {stat.split("(", 1)[1].rsplit(")", 1)[0]} {cmdline}'
    (zombies if state in ('Z', 'X') else alive).append(entry)
print(json.dumps({'runner': runner, 'alive': alive, 'zombies': zombies}))
"""

LEFTOVERS = r"""
import ctypes, multiprocessing, os, subprocess, sys, time
sleeper = subprocess.Popen(['sleep', '1000'])
busy = subprocess.Popen([sys.executable, '-c', 'while True: pass'])
daemonized = subprocess.Popen(
    [sys.executable, '-c',
     'import os, time\n'
     'if os.fork(): os._exit(0)\n'
     'os.setsid()\n'
     'if os.fork(): os._exit(0)\n'
     'while True: time.sleep(0.1)'],
    start_new_session=True,
)
daemonized.wait()
child = os.fork()
if child == 0:
    while True:
        time.sleep(0.1)
def _work():
    while True:
        time.sleep(0.1)
worker = multiprocessing.Process(target=_work, daemon=True)
worker.start()
renamed = os.fork()
if renamed == 0:
    ctypes.CDLL(None).prctl(15, b'kworker/0:1', 0, 0, 0)  # PR_SET_NAME
    while True:
        pass
time.sleep(0.5)
print('started')
"""


async def test_processes_a_run_leaves_behind_are_ended(executor: Executor) -> None:
    session = executor.session("leftovers")
    started = await session.run(LEFTOVERS)
    assert started.status is Status.OK, started.message
    assert started.stdout == "started\n"
    after = json.loads((await session.run(PROCESSES)).stdout)
    assert after["runner"] == 1  # the runner is the sandbox's init
    assert after["alive"] == []
    assert after["zombies"] == []
    # The kernel, and its state, survived.
    assert (await session.run("print(sleeper.poll() is not None)")).stdout == "True\n"


async def test_background_processes_may_be_allowed(runtime: str) -> None:
    limits = SandboxLimits(runtime=runtime, background_processes=True)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        session = ex.session("background")
        await session.run("import subprocess\nsleeper = subprocess.Popen(['sleep', '1000'])")
        after = json.loads((await session.run(PROCESSES)).stdout)
        assert [entry.split()[1] for entry in after["alive"]] == ["sleep"]


async def test_results_are_capped_in_number(executor: Executor) -> None:
    result = await executor.run_notebook(
        "from IPython.display import display\n"
        "for _ in range(3_000):\n"
        "    display({'text/plain': ''}, raw=True)\n"
        "print('done')",
        timeout_s=120,
    )
    assert result.status is Status.OK
    assert result.stdout == "done\n"
    assert len(result.results) == 100
    assert result.dropped_results == 2_900
    assert result.message.count("2,900 more results not shown") == 1


async def test_thousands_of_tiny_charts_are_capped(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import io\n"
        "import matplotlib.pyplot as plt\n"
        "from IPython.display import Image, display\n"
        "figure = plt.figure(figsize=(0.3, 0.3))\n"
        "figure.add_subplot().plot([0, 1])\n"
        "png = io.BytesIO()\n"
        "figure.savefig(png, format='png')\n"
        "plt.close(figure)\n"
        "for _ in range(3_000):\n"
        "    display(Image(png.getvalue()))",
        timeout_s=120,  # 3,000 displays take a while on a loaded machine
    )
    assert result.status is Status.OK, result.message
    assert len(result.results) == 100
    assert all(r.image_types == ["image/png"] for r in result.results)
    assert result.dropped_results == 2_900
    assert "2,900 more results not shown" in result.message


async def test_text_output_is_capped_in_bytes(executor: Executor) -> None:
    result = await executor.run_notebook("print('é' * 3_000)", output_bytes=1_000)
    assert result.output_truncated
    assert len(result.stdout.encode()) <= 1_000
    assert result.stdout.startswith("é" * 400)


WHO = (
    "import getpass, json, os\n"
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 2])\n"
    "plt.savefig('chart.png')\n"
    "print(json.dumps([os.getuid(), os.getgid(), getpass.getuser(), open('in.txt').read(),"
    " os.path.expanduser('~')]))"
)


async def test_code_runs_as_a_user_no_host_account_has(executor: Executor) -> None:
    result = await executor.run_notebook(WHO, files={"in.txt": b"input"})
    assert result.status is Status.OK, result.message
    assert json.loads(result.stdout) == [61000, 61000, "sandbox", "input", "/tmp/home"]
    assert [f.path for f in result.files] == ["chart.png"]


async def test_another_sandbox_user_can_be_configured(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    limits = SandboxLimits(runtime=runtime, uid=62345, gid=62346)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        result = await ex.run_notebook(WHO, files={"in.txt": b"input"})
        assert result.status is Status.OK, result.message
        assert json.loads(result.stdout) == [62345, 62346, "sandbox", "input", "/tmp/home"]
        assert [f.path for f in result.files] == ["chart.png"]
        session = ex.session("uid")
        await session.put_files({"more.txt": b"more"})
        assert (await session.run("open('more.txt').read()")).results[-1].text == "'more'"
