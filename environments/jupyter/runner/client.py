"""The notebook client that streams each output to the host within the run's caps, and the
runner's stderr, kept as a short tail."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from nbclient import NotebookClient

from executor import wire
from runner.results import as_result
from runner.stdin import Secrets

STDERR_TAIL_BYTES = 16 * 1024
STDERR_REPORT_CHARS = 4000
IOPUB_QUEUE = 50_000
"""Messages the runner's end of the kernel's output channel holds: as deep as the kernel's
end (`kernel_launch.IOPUB_QUEUE`), for the same reason."""


class CappedClient(NotebookClient):  # type: ignore[misc]
    """A notebook client that streams each output to the host and caps what it keeps."""

    def __init__(
        self, nb: Any, emit: Callable[[wire.Event], None], secrets: Secrets, **kw: Any
    ) -> None:
        super().__init__(nb, **kw)
        self.emit = emit
        self.secrets = secrets
        self.run_id = ""
        self.text_limit = 1_000_000
        self.rich_limit = 20_000_000
        self.rich_count_limit = 100
        self.reset_caps()

    def reset_caps(self) -> None:
        self.text_bytes = 0
        self.rich_bytes = 0
        self.rich_count = 0
        self.dropped = 0
        self.truncated = False

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        # Every output, and every update of one, passes here before it is kept or sent.
        if self.secrets and isinstance(msg.get("content"), dict):
            msg["content"] = self.secrets.mask(msg["content"])
        return super().process_message(msg, cell, cell_index)

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any, cell_index: int) -> Any:
        msg = as_result(msg)
        msg_type = msg["msg_type"]
        content = msg["content"]
        if msg_type == "stream":
            data = str(content.get("text", "")).encode("utf-8", "replace")
            room = self.text_limit - self.text_bytes
            if room <= 0:
                self.truncated = True
                return None
            if len(data) > room:
                # Cut at a byte count, never inside a character.
                data = data[:room].decode("utf-8", "ignore").encode("utf-8")
                self.truncated = True
            content["text"] = data.decode("utf-8")
            self.text_bytes += len(data)
        elif msg_type in ("display_data", "execute_result", "error"):
            if msg_type != "error" and self.rich_count >= self.rich_count_limit:
                self.dropped += 1
                return None
            size = len(json.dumps(content.get("data", content), ensure_ascii=False).encode())
            if self.rich_bytes + size > self.rich_limit:
                self.truncated = True
                return None
            self.rich_bytes += size
            if msg_type != "error":
                self.rich_count += 1
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None:
            self.emit(wire.Output(id=self.run_id, cell=cell_index, output=out))
        return out


class DeepQueueKernelClient(AsyncKernelClient):  # type: ignore[misc]
    """The kernel client whose sockets queue `IOPUB_QUEUE` messages. The queue is filled by
    ZMQ's own I/O thread, which keeps reading while the runner's Python is busy; a flood
    past it costs the sandbox's own memory, which its limit caps."""

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        # Defaults for every socket made after this, before it connects: a queue's depth
        # is fixed when the connection is made.
        context.setsockopt(zmq.RCVHWM, IOPUB_QUEUE)
        return context

    def start_channels(self, *args: Any, **kwargs: Any) -> None:
        # No heartbeat: whether the kernel lives is asked of its process (the kernel manager
        # is this client's parent), and between requests the kernel rests stopped, where a
        # heartbeat would miss every ping and open a new socket each second, waking the
        # sandbox (dear under gVisor) while it should be idle.
        kwargs["hb"] = False
        super().start_channels(*args, **kwargs)


class NoKey(Exception):
    """The host did not give a key: without one, nothing can be sealed."""


class StderrTail:
    """Descriptor 2 of the runner and of everything it starts (the kernel and what the user's
    code starts): a pipe that a thread drains, keeping only its last 16 KiB. The container's
    own stderr reaches the host (and the engine's log), so it serves only until the runner
    is ready, to say why a start failed; then nothing writes to it. It stays open, since a
    Kubernetes attach ends when one of the container's streams does; under gVisor the
    user's code can open it through /proc, which is why the host keeps only a tail of it."""

    def __init__(self) -> None:
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._original = os.dup(2)
        self._reporting = True
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        threading.Thread(target=self._drain, args=(read,), name="stderr", daemon=True).start()

    def _drain(self, read: int) -> None:
        while chunk := os.read(read, 65536):
            with self._lock:
                self._kept += chunk
                del self._kept[:-STDERR_TAIL_BYTES]

    @property
    def text(self) -> str:
        with self._lock:
            return self._kept.decode("utf-8", "replace")

    def stop_reporting(self) -> None:
        """Once ready: the runner writes nothing more to the container's stderr."""
        self._reporting = False

    def report(self, problem: str) -> None:
        """Why the runner stopped before it was ready, with the tail, on the container's
        stderr (where the host looks when a sandbox ends before its `ready`)."""
        if self._reporting:
            text = f"{self.text[-STDERR_REPORT_CHARS:]}{problem[-STDERR_REPORT_CHARS:]}"
            with contextlib.suppress(OSError):
                os.write(self._original, text.encode("utf-8", "replace"))
