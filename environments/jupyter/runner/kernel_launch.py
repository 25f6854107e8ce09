"""The kernel's own start, in place of `ipykernel_launcher`: the same kernel, whose output
channel holds `IOPUB_QUEUE` messages for the runner instead of ZMQ's default 1,000.

Run as a script by path (`python -P -s .../kernel_launch.py -f CONNECTION_FILE`), so it
imports nothing of the runner's and nothing from the data folder."""

from __future__ import annotations

from typing import Any

import zmq
from ipykernel.kernelapp import IPKernelApp

IOPUB_QUEUE = 50_000
"""Messages queued for a subscriber before the kernel drops its outputs. A run that displays
thousands of things while the runner is slowed (a busy machine) must lose none of them, not
even the last `print`; a flood past this costs the sandbox's own memory, which its limit caps."""


class DeepQueueKernelApp(IPKernelApp):  # type: ignore[misc]
    def init_iopub(self, context: Any) -> None:
        # A socket's queue depth is fixed when a subscriber connects, and the runner connects
        # after the bind: the default is set for this socket alone, before it is made.
        context.setsockopt(zmq.SNDHWM, IOPUB_QUEUE)
        try:
            super().init_iopub(context)
        finally:
            context.sockopts.pop(zmq.SNDHWM, None)


if __name__ == "__main__":
    DeepQueueKernelApp.launch_instance()
