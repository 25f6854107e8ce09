"""Fenced code as each platform sends it: with or without a language tag, with or without a
newline after the opening fence."""

from __future__ import annotations

import pytest

from bot.fences import (
    BACKGROUND_FLAG,
    BESIDE_FLAG,
    direct_code,
    fenced_blocks,
    only_code,
    run_flags,
)
from bot.platforms.markup import code_blocks


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("```print(1)```", "print(1)"),  # Slack: one line, no newline after the fence
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("```py\nprint(1)\n```", "print(1)\n"),
        ("```\nprint(1)\n```", "print(1)\n"),
        ("```python print(1)```", "print(1)"),
        ("```print(1)\nprint(2)```", "print(1)\nprint(2)"),
        ("  ```print(1)```  ", "print(1)"),
    ],
)
def test_one_fenced_block_is_code_to_run(message: str, code: str) -> None:
    assert only_code(message) == code
    assert direct_code(message) == code
    assert code_blocks(message) == code.rstrip("\n")


def test_text_around_a_block_is_not_a_direct_run_but_its_code_is_found() -> None:
    message = "please run ```print(1)``` and ```js\nx()\n```"
    assert only_code(message) is None
    assert direct_code(message) is None
    assert fenced_blocks(message) == ["print(1)", "x()\n"]
    assert direct_code("/run print(2)") == "print(2)"


@pytest.mark.parametrize(
    ("text", "flags", "code"),
    [
        ("print(1)", set(), "print(1)"),
        ("--beside print(1)", {BESIDE_FLAG}, "print(1)"),
        ("  --background\nprint(1)", {BACKGROUND_FLAG}, "print(1)"),
        ("--beside --background x = 1", {BESIDE_FLAG, BACKGROUND_FLAG}, "x = 1"),
        ("--besides = 1", set(), "--besides = 1"),  # a flag is a word of its own
        ("--beside", {BESIDE_FLAG}, ""),
    ],
)
def test_run_flags_are_words_before_the_code(text: str, flags: set[str], code: str) -> None:
    assert run_flags(text) == (flags, code)
