"""Notes about workspaces and the notices of an answer have a bounded length whatever the
names and reasons in them, and a run's status line never stops the progress message from
being drawn."""

from __future__ import annotations

import time

import pytest

from bot.platforms.on_discord.render import MESSAGE_LIMIT as DISCORD_LIMIT
from bot.platforms.on_discord.render import answer_messages
from bot.platforms.on_discord.render import progress_text as discord_progress
from bot.platforms.on_slack.render import MESSAGE_LIMIT as SLACK_LIMIT
from bot.platforms.on_slack.render import SECTION_LIMIT, answer_texts
from bot.platforms.on_slack.render import progress_text as slack_progress
from bot.platforms.progress import RunView, TurnView, fit_notices
from bot.sandbox_words import restored_note, saved_note, shown
from bot.text import run_status
from executor import Status
from executor.workspace import Workspace

HUGE = "a" * 400_000
NAMES = {
    "huge": [HUGE],
    "thousands": [f"v{i}" for i in range(10_000)],
    "huge and many": [HUGE + str(i) for i in range(50)],
    "marks": ["line\nbreak", "\r", "\u202eevil", "\x1b[31m", "\u2028", "tab\there"],
}


@pytest.mark.parametrize("kind", list(NAMES))
def test_a_restore_note_stays_short_and_on_one_line(kind: str) -> None:
    names = NAMES[kind]
    workspace = Workspace(
        created=time.time(),
        saved=tuple(names),
        skipped={name: "x" * 1000 for name in names[:-1]} | {names[-1]: "x" * 400_000},
        files={f"{name[:40]}.csv": b"" for name in names[:5]},
    )
    note = restored_note(workspace, names, {"late": "why " * 100_000})
    assert len(note) < 1600
    assert note.startswith("Restored your workspace from a moment ago: ")
    assert "; not restored: " in note
    assert note.isprintable(), note[:200]
    again = saved_note(workspace)
    assert len(again) < 800
    assert again.isprintable()
    assert again.endswith("/restore brings it back.")


def test_names_are_shortened_saying_how_long_they_were_and_escaped() -> None:
    assert shown(HUGE, 48) == "a" * 26 + "… (400,000 characters)"
    assert len(shown(HUGE, 48)) <= 48
    assert shown("line\nbreak\u202e", 48) == "line\\nbreak\\u202e"
    assert shown("\x00" * 100, 48).endswith("… (100 characters)")
    assert len(shown("\x00" * 100, 48)) <= 48
    many = [f"v{i}" for i in range(5000)]
    note = restored_note(Workspace(created=time.time(), saved=tuple(many)), many, {})
    assert note.endswith(" more.")
    assert "v0, v1, v2" in note
    counted = int(note.rsplit(" and ", 1)[1].split()[0].replace(",", ""))
    assert counted + note.count(", ") + 1 == 5000


@pytest.mark.parametrize(
    "notices",
    [
        ["a" * 800_000],
        ["<" * 50_000, "&" * 50_000],
        ["x"] * 5000,
        ["short one", "b" * 10_000, "short two"],
    ],
)
def test_notices_fit_one_message_on_each_platform(notices: list[str]) -> None:
    view = TurnView(notices=list(notices), answer="The answer.")
    discord = answer_messages(view, 10_000_000)
    assert len(discord) <= 2
    assert discord[-1].content.endswith("The answer.")
    assert all(len(m.content) <= DISCORD_LIMIT for m in discord)
    slack = answer_texts(view, [])
    assert len(slack) <= 2
    assert slack[-1].endswith("The answer.")
    assert all(len(text) <= SLACK_LIMIT for text in slack)
    lines = fit_notices(notices, 1000, lambda n: n.replace("<", "&lt;"))
    assert sum(len(line) + 1 for line in lines) <= 1000
    if len(notices) > 1 and len(lines) < len(notices):
        assert lines[-1].endswith("not shown.")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("message", ["a" * 800_000, "<" * 50_000, "`" * 30_000])
def test_a_long_status_line_still_draws_a_progress_message(message: str) -> None:
    run = RunView("x = 1\n" * 500, status=Status.OK, message=message)
    view = TurnView(runs=[run])
    assert len(discord_progress(view)) <= DISCORD_LIMIT
    assert len(slack_progress(view)) <= SECTION_LIMIT
    assert len(run_status(Status.OK, 10, message)) < 1300
