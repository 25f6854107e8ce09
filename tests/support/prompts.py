"""The code's input() and getpass() in the fast layer's front-end tests: the cells that ask,
the fake sandbox's script for them, and where a getpass() answer must not be found."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from executor import InputAsked
from executor.fake_backend import FakeRun
from executor.run_input import InputCallback

ASK_NAME = "name = input('Name: ')\nprint(name)"
ASK_HIDDEN = "key = getpass('Password: ')\nprint(key)"
HIDDEN_ANSWER = "s3cr3t-hunter2"
ASKING = {
    ASK_NAME: FakeRun(asks=[("Name: ", False)]),
    ASK_HIDDEN: FakeRun(asks=[("Password: ", True)]),
}


def answering(*answers: str | None, after_s: float = 0.0) -> tuple[list[InputAsked], InputCallback]:
    """An `on_input` that gives `answers` in turn (None: no answer), each after `after_s`;
    and the list of what it was asked."""
    asked: list[InputAsked] = []
    queue = list(answers)

    async def on_input(question: InputAsked) -> str | None:
        asked.append(question)
        await asyncio.sleep(after_s)
        return queue.pop(0)

    return asked, on_input


def _files_holding(root: Path, text: str) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and text.encode() in path.read_bytes():
            found.append(path)
    return found


async def assert_kept_nowhere(
    answer: str, *, shown: Iterable[str], model_requests: list[Any], logs: str, root: Path
) -> None:
    """`answer` is in none of what people were shown, what the model was sent, the log, or
    any file under `root` (the history, exports, published files, workspaces)."""
    assert [text[:2000] for text in shown if answer in text] == []
    assert answer not in json.dumps(model_requests)
    assert answer not in logs
    assert await asyncio.to_thread(_files_holding, root, answer) == []
