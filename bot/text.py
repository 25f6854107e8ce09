"""The words and marks every front end uses for the same things: a run's status, sizes and
durations. Chats show emoji; terminals show marks that every font has."""

from __future__ import annotations

import math

from executor import Status

CHAT_MARK = {
    Status.OK: "✅",
    Status.ERROR: "❌",
    Status.TIMEOUT: "⏱️",
    Status.MEMORY: "❌",
    Status.KILLED: "⏹️",
}
TERMINAL_MARK = {
    Status.OK: "✓",
    Status.ERROR: "✗",
    Status.TIMEOUT: "⏱",
    Status.MEMORY: "✗",
    Status.KILLED: "■",
}


def run_status(status: Status, duration_ms: int, message: str = "", *, chat: bool = True) -> str:
    """One line for how a run ended: `✅ ok in 0.12 s`, with the executor's message if any."""
    mark = (CHAT_MARK if chat else TERMINAL_MARK)[status]
    detail = f": {message}" if message else ""
    return f"{mark} {status.value} in {duration_ms / 1000:.2f} s{detail}"


def human_size(size: int) -> str:
    """Bytes as people read them: 512 B, 28.4 kB, 3.1 MB."""
    if size < 1000:
        return f"{size} B"
    return f"{size / 1000:.1f} kB" if size < 1_000_000 else f"{size / 1e6:.1f} MB"


def human_duration(seconds: float) -> str:
    """A wait or an allowance, rounded up: 45 s, 3 min, 2.5 h."""
    seconds = max(1, math.ceil(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
