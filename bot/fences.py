"""Code in chat messages: fenced blocks as every platform sends them.

A block may have a language tag or not, and a newline after the opening fence or not:
Slack sends ```print(1)``` on one line, Discord and the console send ```python\\n...\\n```.
"""

from __future__ import annotations

import re

FENCE = re.compile(r"```(?P<first>[^\n`]*)(?P<newline>\n?)(?P<rest>.*?)```", re.DOTALL)
TAG = re.compile(r"[A-Za-z0-9_+#.-]{1,20}")
PYTHON_PREFIX = re.compile(r"(?:python3?|py)\s+", re.IGNORECASE)


def _code(found: re.Match[str]) -> str:
    first, rest = found["first"], found["rest"]
    if found["newline"]:
        # ```tag\n...```: the first line is a language tag (or empty); otherwise it is code.
        return rest if not first.strip() or TAG.fullmatch(first.strip()) else f"{first}\n{rest}"
    # ```...``` on one line: all of it is code, but for a leading "python " tag.
    return PYTHON_PREFIX.sub("", first, count=1) + rest


def fenced_blocks(text: str) -> list[str]:
    """The code of every fenced block in `text`, in order."""
    return [_code(found) for found in FENCE.finditer(text)]


def only_code(text: str) -> str | None:
    """The code of a message that is one fenced block and nothing else; else None."""
    found = FENCE.fullmatch(text.strip())
    return _code(found) if found else None
