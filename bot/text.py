"""The words and marks every front end uses for the same things: a run's status, sizes and
durations. Chats show emoji; terminals show marks that every font has."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bot.fences import as_run
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


MESSAGE_SHOWN = 1200
"""Characters of the executor's message a run's status line shows: the message can quote
names and reasons from the sandbox (a restore note), and the line must fit one chat message
beside the code and output."""


def run_status(status: Status, duration_ms: int, message: str = "", *, chat: bool = True) -> str:
    """One line for how a run ended: `✅ ok in 0.12 s`, with the executor's message if any
    (shortened past `MESSAGE_SHOWN` characters)."""
    mark = (CHAT_MARK if chat else TERMINAL_MARK)[status]
    detail = f": {clip(message, MESSAGE_SHOWN)}" if message else ""
    return f"{mark} {status.value} in {duration_ms / 1000:.2f} s{detail}"


def clip(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, saying how many more there were when cut."""
    if len(text) <= limit:
        return text
    mark = f"… ({len(text) - limit + 40:,} more characters)"
    return text[: max(0, limit - 40)] + mark


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


NAME_CHARS = 40
"""Characters of a variable's name a note shows; longer names are cut with an ellipsis."""


def short_name(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def names_line(names: Sequence[str], shown: int = 8) -> str:
    """Variable names for a one-line note: the first few, each cut short and made visible."""
    line = ", ".join(short_name(as_run(name).replace("\n", "\\n")) for name in names[:shown])
    return line + (f" and {len(names) - shown} more" if len(names) > shown else "")
