"""An answer where the bot is not in the place (a user install): it fits the five follow-ups
Discord allows there, with a note counting what did not fit, and keeps the last follow-up
for the answer rather than a passing note."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import discord

from bot.platforms.on_discord.render import MESSAGE_LIMIT, Outgoing
from bot.platforms.on_discord.user_install import ResponseOnly, fitted


def test_short_texts_are_joined_and_files_keep_their_message() -> None:
    messages = [Outgoing("a", [("chart.png", b"x")]), Outgoing("b"), Outgoing("c")]
    assert [(m.content, len(m.files)) for m in fitted(messages, 5)] == [("a\nb\nc", 1)]


def test_what_does_not_fit_is_counted_on_the_last_message_shown() -> None:
    long = "x" * (MESSAGE_LIMIT - 10)
    messages = [Outgoing(long) for _ in range(7)]
    shown = fitted(messages, 5)
    assert len(shown) == 5
    assert all(len(m.content) <= MESSAGE_LIMIT for m in shown)
    # The last one had no room for the note as well: the note takes its place.
    assert shown[-1].content.startswith("ℹ️ 3 more part(s) of this answer were not shown")
    assert shown[0].content == long
    assert fitted(messages, 0) == []


class _Followups:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bool]] = []

    async def send(self, content: str, ephemeral: bool = False, **_: Any) -> str:
        self.sent.append((content, ephemeral))
        return content


async def test_the_last_follow_up_is_kept_for_the_answer() -> None:
    followups = _Followups()
    edits: list[str] = []

    async def edit_original_response(content: str, **_: Any) -> str:
        edits.append(content)
        return content

    interaction = SimpleNamespace(edit_original_response=edit_original_response, followup=followups)
    surface = ResponseOnly(cast(discord.Interaction, interaction), followups=2)
    assert await surface.send("progress") == "progress"
    await surface.notify("a note")  # one follow-up of two: it may go
    await surface.notify("another note")  # the last one is kept for the answer
    assert await surface.send("the answer") == "the answer"
    assert await surface.send("more") is None  # none left: not shown, and nothing else tried
    assert edits == ["progress"]
    assert followups.sent == [("a note", True), ("the answer", False)]
