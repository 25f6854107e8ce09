"""What an approver sees is what runs: code with characters that end a line for Python but
not for a chat client (a lone CR), or for a client but not for Python (U+2028, NEL, form
feed, vertical tab), or that a client may not draw (zero-width, bidirectional controls, other
control and format characters) is made plain once, before it is both shown and run. On the
console, Discord and Slack cards (stand-in servers, the real clients, the fake sandbox)."""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Awaitable, Callable

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.fences import as_run, direct_code
from executor.fake_backend import FakeBackend
from tests.fast import test_approval_discord as on_discord
from tests.fast.test_approval_console import chat
from tests.fast.test_approval_discord import sandbox_limits, start_bot
from tests.fast.test_console_turns import Chat
from tests.support.on_discord import Bot as DiscordBot

__all__ = ["chat", "sandbox_limits", "start_bot"]

HIDDEN = {
    "lone CR": "\r",
    "CRLF": "\r\n",
    "form feed": "\x0c",
    "vertical tab": "\x0b",
    "NEL": "\x85",
    "file separator": "\x1c",
    "LINE SEPARATOR": "\u2028",
    "PARAGRAPH SEPARATOR": "\u2029",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "right-to-left override": "\u202e",
    "left-to-right embedding": "\u202a",
    "right-to-left isolate": "\u2067",
    "pop directional isolate": "\u2069",
    "byte order mark": "\ufeff",
    "escape": "\x1b",
    "tag character": "\U000e0041",
}
PYTHON_BREAKS = {"\r", "\r\n"}
"""The only characters that end a line for Python's tokenizer (besides LF)."""


def _attack(separator: str) -> str:
    return f"x = 1  # harmless{separator}import os; print('ran')"


@pytest.mark.parametrize("separator", HIDDEN.values(), ids=HIDDEN.keys())
def test_the_lines_a_client_draws_are_the_lines_python_runs(separator: str) -> None:
    original = _attack(separator)
    shown = as_run(original)
    # Every break a client may draw (str.splitlines knows them all) is one Python sees.
    assert shown.splitlines() == shown.split("\n")
    assert all(
        char in "\n\t" or unicodedata.category(char)[0] not in "CZ" or char == " " for char in shown
    )
    python_runs = ast.dump(ast.parse(original))
    assert ast.dump(ast.parse(shown)) == python_runs  # the same statements run
    # The import runs exactly when the card shows it on a line of its own.
    runs_import = separator in PYTHON_BREAKS
    assert ("Import(" in python_runs) is runs_import
    assert len(shown.split("\n")) == (2 if runs_import else 1)
    assert as_run(shown) == shown  # once is enough


def test_inside_a_string_an_escape_keeps_the_value() -> None:
    code = 's = "a\u200bb\u2028c\x0cd"'
    namespace: dict[str, str] = {}
    exec(as_run(code), namespace)  # noqa: S102 - the test's own string
    assert namespace["s"] == "a\u200bb\u2028c\x0cd"


def test_direct_runs_are_made_plain_too() -> None:
    assert direct_code(f"/run {_attack(chr(13))}") == "x = 1  # harmless\nimport os; print('ran')"
    fenced = f"```python\n{_attack(chr(0x2028))}\n```"
    assert direct_code(fenced) == "x = 1  # harmless\\u2028import os; print('ran')\n"


@pytest.mark.parametrize("separator", HIDDEN.values(), ids=HIDDEN.keys())
async def test_the_console_card_shows_what_runs(
    chat: Callable[..., Chat],
    model: ScriptedModel,
    fake_backend: FakeBackend,
    separator: str,
) -> None:
    model.script(runs(_attack(separator)), says("Done."))
    out = await chat(default="approve").pipe("go", "y")
    (ran,) = fake_backend.runs
    assert ran == as_run(_attack(separator))
    shown = out[: out.index("Run this code?")]
    assert f"The model wants to run this code:\n{ran}\n" in shown


ON_CARDS = {key: HIDDEN[key] for key in ("lone CR", "LINE SEPARATOR", "right-to-left override")}


def _code_in(text: str) -> str:
    found = re.search(r"```(?:py)?\n(.*?)\n```", text, re.DOTALL)
    assert found is not None, text
    return found.group(1)


@pytest.mark.parametrize("separator", ON_CARDS.values(), ids=ON_CARDS.keys())
async def test_the_discord_card_shows_what_runs(
    start_bot: Callable[..., Awaitable[DiscordBot]],
    model: ScriptedModel,
    fake_backend: FakeBackend,
    separator: str,
) -> None:
    bot = await start_bot()
    assert "is now approve" in await on_discord._set_policy(bot, "approve")
    model.script(runs(_attack(separator)), says("Done."))
    thread_id = await on_discord._ask(bot)
    asking = await on_discord._approval(bot, thread_id)
    shown = _code_in(asking.content)
    assert fake_backend.runs == []
    await on_discord._click(bot, asking, "Run")
    await on_discord._answer(bot, thread_id, "Done.")
    assert fake_backend.runs == [shown]
    assert shown.splitlines() == shown.split("\n")
