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


FILES_LISTED = 50


def files_text(found: list[tuple[str, int]], heading: str = "") -> str:
    """A /files answer in chat markdown: names in code spans, sizes, a heading if any."""
    lines = [f"`{path}` ({size:,} bytes)" for path, size in found[:FILES_LISTED]]
    if len(found) > FILES_LISTED:
        lines.append(f"… and {len(found) - FILES_LISTED} more")
    if not lines:
        return "No files in /mnt/data yet."
    return "\n".join([heading, *lines] if heading else lines)
