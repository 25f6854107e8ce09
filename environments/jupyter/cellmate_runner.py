"""The process inside a Cellmate sandbox.

It owns one Jupyter kernel and speaks JSON lines with the host over the container's
attached stdin/stdout, so it works under runc and gVisor alike and needs no socket, port or
shared folder. Everything it reports is untrusted on the host side: user code runs as the
same user and could write to this process's stdout, so the host caps and validates it all.

Requests (one JSON object per line on stdin):
    {"op": "run", "cells": ["code", ...]}   run cells in order, stop at the first error
    {"op": "interrupt"}                     send SIGINT to the kernel
    {"op": "shutdown"}                      stop the kernel and exit

Events (one JSON object per line on stdout):
    {"type": "ready", "python": "3.11.2", "startup_ms": 812}
    {"type": "output", "cell": 0, "output": {nbformat output}}
    {"type": "done", "status": "ok|error|died", "notebook": {...}, ...}
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

OUTPUT_LIMIT = int(os.environ.get("CELLMATE_OUTPUT_LIMIT", str(1_000_000)))
RICH_OUTPUT_LIMIT = int(os.environ.get("CELLMATE_RICH_OUTPUT_LIMIT", str(20_000_000)))
MPL_CACHE_SEED = Path("/opt/cellmate/mplconfig")

# Runs silently in the kernel before user code: charts as inline PNG display data, at a
# size that reads well in chat.
KERNEL_SETUP = """
import matplotlib as _mpl
_mpl.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (8, 5)})
del _mpl
"""


class CappedClient(NotebookClient):  # type: ignore[misc]
    """A notebook client that streams each output to the host and caps what it keeps."""

    def __init__(self, nb: Any, emit: Any, **kw: Any) -> None:
        super().__init__(nb, **kw)
        self.emit = emit
        self.text_bytes = 0
        self.rich_bytes = 0
        self.truncated = False

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any, cell_index: int) -> Any:
        msg_type = msg["msg_type"]
        content = msg["content"]
        if msg_type == "stream":
            size = len(content.get("text", "").encode("utf-8", "replace"))
            if self.text_bytes + size > OUTPUT_LIMIT:
                room = max(0, OUTPUT_LIMIT - self.text_bytes)
                if not self.truncated and room:
                    content["text"] = content["text"][:room]
                    self.text_bytes = OUTPUT_LIMIT
                else:
                    self.truncated = True
                    return None
                self.truncated = True
            else:
                self.text_bytes += size
        elif msg_type in ("display_data", "execute_result", "error"):
            size = len(json.dumps(content.get("data", content)))
            if self.rich_bytes + size > RICH_OUTPUT_LIMIT:
                self.truncated = True
                return None
            self.rich_bytes += size
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None:
            self.emit({"type": "output", "cell": cell_index, "output": out})
        return out


class Runner:
    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
        self.nb = nbformat.v4.new_notebook()
        self.nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        self.client = CappedClient(
            self.nb,
            self.emit,
            timeout=None,
            allow_errors=False,
            kernel_name="python3",
            record_timing=True,
            iopub_timeout=10,
            shutdown_kernel="immediate",
        )
        self.running: asyncio.Task[None] | None = None

    def emit(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event, default=str) + "\n")

    async def start(self) -> None:
        started = time.monotonic()
        prepare_writable_dirs()
        self.client.km = self.client.create_kernel_manager()
        await self.client.async_start_new_kernel(cwd="/mnt/data")
        await self.client.async_start_new_kernel_client()
        await self.client.kc.execute_interactive(KERNEL_SETUP, silent=True, store_history=False)
        self.emit(
            {
                "type": "ready",
                "python": sys.version.split()[0],
                "startup_ms": round((time.monotonic() - started) * 1000),
            }
        )

    async def run(self, cells: list[str]) -> None:
        status = "ok"
        detail: dict[str, Any] = {}
        oom_before = oom_kills()
        self.client.text_bytes = self.client.rich_bytes = 0
        self.client.truncated = False
        for source in cells:
            cell = nbformat.v4.new_code_cell(source)
            self.nb.cells.append(cell)
            index = len(self.nb.cells) - 1
            try:
                await self.client.async_execute_cell(cell, index)
            except CellExecutionError:
                status = "error"
                break
            except DeadKernelError:
                status = "died"
                detail = {
                    "exit_code": await kernel_exit_code(self.client),
                    "oom": oom_kills() > oom_before,
                }
                break
        self.emit(
            {
                "type": "done",
                "status": status,
                "truncated": self.client.truncated,
                "notebook": self.nb,
                **detail,
            }
        )

    async def interrupt(self) -> None:
        if self.client.km is not None:
            await self.client.km.interrupt_kernel()

    async def serve(self) -> None:
        reader = await stdin_reader()
        await self.start()
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                request = json.loads(line)
                op = request["op"]
            except (ValueError, KeyError, TypeError):
                self.emit({"type": "log", "message": "malformed request ignored"})
                continue
            if op == "run":
                if self.running is not None and not self.running.done():
                    self.emit({"type": "log", "message": "a run is already in progress"})
                    continue
                self.running = asyncio.create_task(self.run([str(c) for c in request["cells"]]))
            elif op == "interrupt":
                await self.interrupt()
            elif op == "shutdown":
                break
        if self.running is not None:
            self.running.cancel()
        await self.client._async_cleanup_kernel()


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


async def stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def main() -> None:
    # Nothing the kernel prints to the inherited descriptors may reach the protocol stream.
    runner = Runner()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    asyncio.run(runner.serve())


if __name__ == "__main__":
    main()
