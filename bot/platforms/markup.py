"""Text that chat platforms show: output made harmless, code fenced, long text split.

Sandboxed code controls its output, so output is treated as hostile: it must not close the
code block it is shown in, reorder text with bidirectional controls, hide characters with
zero-width ones, or ping anyone. Splitting keeps code blocks intact across messages.
"""

from __future__ import annotations

import re

from bot.fences import fenced_blocks

# Bidirectional controls can make shown text differ from the real text (the "Trojan Source"
# trick); zero-width characters hide text. Both are shown as visible escapes.
INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
BACKTICK_RUN = re.compile(r"`{3,}")
FENCE_LINE = re.compile(r"^\s*```")
ZWSP = "\u200b"


def visible(text: str) -> str:
    """Invisible and direction-changing characters as `\\u....` escapes."""
    return INVISIBLE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def break_fences(text: str) -> str:
    """Runs of three or more backticks broken up, so the text cannot end a code block.

    The separator is a zero-width space: output's own zero-width spaces were already made
    visible by `visible`, so the only invisible characters left are these.
    """
    return BACKTICK_RUN.sub(lambda match: ZWSP.join(match.group()), text)


def code_block(text: str, language: str = "") -> str:
    """`text` in a fenced block it cannot break out of."""
    body = break_fences(visible(text)).rstrip("\n")
    return f"```{language}\n{body or ' '}\n```"


def tail(text: str, limit: int) -> str:
    """The last `limit` characters or fewer, starting at a line where possible."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    if 0 <= newline < limit // 2:
        cut = cut[newline + 1 :]
    return f"… {len(text) - len(cut):,} earlier characters not shown\n{cut}"


def head(text: str, limit: int) -> str:
    """The first `limit` characters or fewer, ending at a line where possible."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    newline = cut.rfind("\n")
    if newline > limit // 2:
        cut = cut[:newline]
    return f"{cut}\n… {len(text) - len(cut):,} more characters"


def split_message(text: str, limit: int) -> list[str]:
    """Pieces of at most `limit` characters, cut at line ends.

    A piece that ends inside a code block closes it, and the next piece reopens it with the
    same language, so every piece renders on its own. Lines longer than a piece are cut.
    """
    if limit < 60:
        raise ValueError("limit is too small to split into code blocks")
    budget = limit - 4  # room for the "\n```" that closes a block cut in two
    longest_line = budget - 24  # room for a reopening fence line
    pieces: list[str] = []
    lines: list[str] = []
    size = 0
    opener = ""  # the fence line of the block open at this point, if any

    def close_piece() -> None:
        nonlocal lines, size
        if len(lines) > (1 if opener else 0):
            pieces.append("\n".join(lines) + ("\n```" if opener else ""))
        lines = [opener] if opener else []
        size = len(opener) + 1 if opener else 0

    for line in text.split("\n"):
        parts = [line[i : i + longest_line] for i in range(0, len(line), longest_line)] or [""]
        for part in parts:
            if size + len(part) > budget:
                close_piece()
            lines.append(part)
            size += len(part) + 1
        if FENCE_LINE.match(line):
            fence = line.strip()
            opener = "" if opener else (fence if len(fence) <= 20 else "```")
    close_piece()
    return pieces or [""]


def code_blocks(text: str) -> str | None:
    """The code in a message: its fenced blocks joined, or the whole text if it has none."""
    blocks = fenced_blocks(text)
    if blocks:
        return "\n\n".join(block.rstrip("\n") for block in blocks)
    inline = re.fullmatch(r"\s*`([^`]+)`\s*", text)
    if inline:
        return inline.group(1)
    return text.strip() or None
