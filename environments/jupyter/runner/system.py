"""What the runner does to processes and to itself: the kernel's and others' states in /proc,
the limits it sets before any user code, and its own input."""

from __future__ import annotations

import asyncio
import ctypes
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from nbclient import NotebookClient

from runner.kernel_scripts import MATPLOTLIBRC, PRELOADABLE

MPL_CACHE_SEED = Path("/opt/cellmate/mplconfig")
STOP_WAIT_S = 5.0
PR_SET_DUMPABLE = 4


def pids() -> set[int]:
    return {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()}


def processes() -> list[tuple[int, str, int]]:
    """(pid, state, parent pid) of every other process in the sandbox."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2 and fields[1].isdigit():
            found.append((int(entry.name), fields[0], int(fields[1])))
    return found


def descendants(pid: int) -> set[int]:
    """The process and every process under it."""
    children: dict[int, list[int]] = {}
    for child, _, parent in processes():
        children.setdefault(parent, []).append(child)
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def preload_modules() -> tuple[str, ...]:
    """The modules the warm-up imports: those of PRELOADABLE that CELLMATE_PRELOAD names (all
    of them where it is not set)."""
    wanted = os.environ.get("CELLMATE_PRELOAD", ",".join(PRELOADABLE)).split(",")
    return tuple(name for name in PRELOADABLE if name in {part.strip() for part in wanted})


def prepare_writable_dirs() -> None:
    for name in ("HOME", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR", "JUPYTER_DATA_DIR"):
        value = os.environ.get(name)
        if value:
            Path(value).mkdir(parents=True, exist_ok=True)
    # The font cache built into the image saves matplotlib a few seconds on first import.
    mpl_dir = os.environ.get("MPLCONFIGDIR")
    if mpl_dir and MPL_CACHE_SEED.is_dir():
        for seed in MPL_CACHE_SEED.iterdir():
            shutil.copy(seed, Path(mpl_dir) / seed.name)
    if mpl_dir:
        (Path(mpl_dir) / "matplotlibrc").write_text(MATPLOTLIBRC)


def oom_kills() -> int:
    """How often the kernel's memory cgroup has OOM-killed a process (v1 or v2)."""
    for path, key in (
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
    ):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            continue
    return 0


async def kernel_exit_code(client: NotebookClient) -> int | None:
    provisioner = getattr(client.km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is None:
        return None
    for _ in range(20):
        code = process.poll()
        if code is not None:
            return int(code)
        await asyncio.sleep(0.05)
    return None


def is_stopped(pid: int) -> bool:
    """Whether the process is in the stopped state (T), as /proc shows it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


async def stopped(process: Any) -> None:
    """Wait until every thread of the kernel (the runner's child) has stopped: a thread in
    the middle of a system call stops only when it returns from it."""
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        try:  # WNOHANG: never blocks
            pid, status = os.waitpid(process.pid, os.WNOHANG | os.WUNTRACED)  # noqa: ASYNC222
        except ChildProcessError:
            return
        if pid == process.pid:
            if not os.WIFSTOPPED(status):  # it ended: keep its exit code for Popen
                process.returncode = os.waitstatus_to_exitcode(status)
            return
        await asyncio.sleep(0.002)


async def stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def make_unreadable() -> None:
    """Keep the user's code (the same user) out of this process's memory: no
    /proc/<pid>/mem, ptrace or process_vm_readv (under runc no environ or fd either).
    Before the key exists."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit(f"cannot make the runner non-dumpable: {os.strerror(ctypes.get_errno())}")


def ignore(signum: int, frame: Any) -> None:
    """An init gets no signal from inside its namespace that it has no handler for; this
    one keeps SIGINT (which Python handles) from ending the runner too."""


def limit_file_size() -> None:
    """Where the engine sets no file size limit (a Kubernetes Pod), the runner sets it for
    itself and every process after it, before any user code; none can raise it again."""
    size = os.environ.get("CELLMATE_FILE_SIZE_BYTES", "")
    if size.isdigit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(size), int(size)))
