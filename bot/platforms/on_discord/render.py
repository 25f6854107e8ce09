"""What Discord shows for a turn: the progress message, and the answer with its files.

Pure functions of a `TurnView`, so that layout and limits are tested without Discord.
Discord allows 2,000 characters and 10 attachments per message, and a per-message upload
size that depends on the server; what does not fit as an attachment goes as a link.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import discord

from bot.fences import only_code
from bot.platforms.markup import code_block, head, split_message, tail
from bot.platforms.progress import (
    TurnView,
    extra_files,
    fit_notices,
    fit_progress,
    link_line,
    shown_artifacts,
    status_line,
)

MESSAGE_LIMIT = 2000
MAX_ATTACHMENTS = 10
CODE_SHOWN = 800
OUTPUT_SHOWN = 800
NOTICES_ROOM = MESSAGE_LIMIT - 100
"""All of an answer's notices together: one message at most."""
MARKS = {
    "waiting": "⏳",
    "thinking": "⏳",
    "writing": "✍️",
    "approval": "🔐",
    "failed": "❌",
    "notice": "ℹ️",
}
"""The mark before each kind of status line (`TurnView.doing`) and answer line."""


@dataclass(slots=True)
class Outgoing:
    content: str
    files: list[tuple[str, bytes]] = field(default_factory=list)


def progress_text(view: TurnView) -> str:
    """The progress message: the code being run, its latest output, and where things are."""
    return fit_progress(
        lambda code, output: _progress(view, code, output),
        CODE_SHOWN,
        OUTPUT_SHOWN,
        MESSAGE_LIMIT,
        MESSAGE_LIMIT - 40,
    )


FENCE_TAGS = {"python": "py", "r": "r", "javascript": "js", "typescript": "ts", "bash": "bash"}
"""Discord's highlighting names for the languages code runs in."""


def _progress(view: TurnView, code_room: int, output_room: int) -> str:
    run = view.current
    thinking = status_line(view, MARKS, lambda draft: tail(draft, 2 * output_room + 200))
    if run is None:
        return thinking
    count = len(view.runs)
    title = "**Code**" if count == 1 else f"**Code** (run {count}; earlier runs are attached)"
    if view.done and count > 1:
        title = f"**Code** (last of {count} runs; all are attached)"
    parts = [title, code_block(head(run.code, code_room), FENCE_TAGS.get(run.language, ""))]
    output = run.text
    if output.strip():
        parts.append(code_block(tail(output, output_room)))
    parts.append(plain(run.summary()))
    if run.status is not None and not view.done:
        parts.append(thinking)
    return "\n".join(parts)


def answer_messages(view: TurnView, upload_limit: int, max_files: int = 10) -> list[Outgoing]:
    """The answer, split to fit, with charts, files (at most `max_files`), long code and
    long output attached."""
    lines = fit_notices(
        view.notices, NOTICES_ROOM, lambda notice: f"{MARKS['notice']} {plain(notice)}"
    )
    ending = view.ending()
    if ending is not None:
        lines.append(f"{MARKS['failed']} {ending.text}" if ending.failed else ending.text)
    attached: list[tuple[str, bytes]] = []
    room = upload_limit
    for name, content in extra_files(view, CODE_SHOWN, OUTPUT_SHOWN):
        if len(attached) < MAX_ATTACHMENTS and len(content) <= room:
            attached.append((name, content))
            room -= len(content)
    listed = []
    artifacts, hidden = shown_artifacts(view, max_files)
    for artifact in artifacts:
        data = artifact.content
        if data is not None and len(attached) < MAX_ATTACHMENTS and len(data) <= room:
            attached.append((artifact.name, data))
            room -= len(data)
        else:
            listed.append(link_line(artifact, "📎 [{name}]({link}) ({size})"))
    if listed:
        lines += ["", *listed]
    if hidden:
        lines += ["", f"{MARKS['notice']} {hidden}"]
    pieces = split_message("\n".join(lines), MESSAGE_LIMIT)
    messages = [Outgoing(piece) for piece in pieces]
    messages[0].files = attached
    return messages


def plain(text: str) -> str:
    """Our own words with names and reasons in them (a notice) shown as written: markdown
    escaped, so a name cannot bold, link, open a code block or quote, and mentions broken, so
    `@everyone` in a name pings nobody even if mentions were allowed."""
    return discord.utils.escape_mentions(discord.utils.escape_markdown(text))


def thread_name(text: str) -> str:
    """A thread title from the request: its first line, without code fences, ≤ 90 chars."""
    for line in (only_code(text) or text).splitlines():
        line = line.strip().strip("`").strip()
        if line:
            return line if len(line) <= 90 else line[:89] + "…"
    return "Cellmate"
