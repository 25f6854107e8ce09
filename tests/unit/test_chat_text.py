"""What chat platforms show: harmless output, intact code blocks, answers that fit."""

from __future__ import annotations

import pytest

from bot.conversations.access import AccessRules, Place, Seen, allowed
from bot.events import (
    Answer,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    Failure,
    OutputChunk,
)
from bot.platforms.markup import code_block, code_blocks, split_message, tail, visible
from bot.platforms.on_discord.render import (
    MESSAGE_LIMIT,
    answer_messages,
    progress_text,
    thread_name,
)
from bot.platforms.progress import TurnView
from executor import OutputEvent, Status
from storage.artifacts import Artifact


def test_output_cannot_close_its_code_block() -> None:
    block = code_block("before\n```\n@everyone outside\n````python\nafter")
    assert block.startswith("```\n")
    assert block.endswith("\n```")
    inner = block[4:-4]
    assert "```" not in inner


def test_direction_and_zero_width_characters_are_shown_as_escapes() -> None:
    shown = visible("abc\u202eevil\u200bhidden\u2066x")
    assert shown == "abc\\u202eevil\\u200bhidden\\u2066x"


@pytest.mark.parametrize("limit", [100, 2000, 4000])
def test_split_keeps_pieces_within_the_limit_and_code_blocks_whole(limit: int) -> None:
    code = "\n".join(f"value_{i} = {i} * 2" for i in range(600))
    text = f"Here is the code:\n```python\n{code}\n```\nAnd a long tail: " + "z" * 5000
    pieces = split_message(text, limit)
    assert len(pieces) > 1
    for piece in pieces:
        assert len(piece) <= limit
        assert piece.count("```") % 2 == 0, piece[:80]
    rejoined = "".join(pieces)
    for i in (0, 299, 599):
        assert f"value_{i} = {i} * 2" in rejoined
    assert rejoined.count("z") == 5000


def test_split_leaves_short_text_alone() -> None:
    assert split_message("hello\n\nworld", 2000) == ["hello\n\nworld"]


def test_tail_says_how_much_is_hidden() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    shown = tail(text, 200)
    assert shown.startswith("… ")
    assert "earlier characters not shown" in shown
    assert shown.endswith("line 999\n")


def test_code_blocks_of_a_message() -> None:
    assert code_blocks("look:\n```py\nx = 1\n```\nand\n```\nprint(x)\n```") == "x = 1\n\nprint(x)"
    assert code_blocks("`1 + 1`") == "1 + 1"
    assert code_blocks("print('bare')") == "print('bare')"
    assert code_blocks("   ") is None


def _run_view(output: str, code: str = "print('hi')") -> TurnView:
    view = TurnView()
    view.apply(CodeStarted(code))
    view.apply(OutputChunk(OutputEvent(kind="stdout", text=output)))
    return view


def test_progress_message_fits_discord_even_with_escape_heavy_output() -> None:
    view = _run_view("\u202e" * 5000, code="x = '\u200b'\n" * 500)
    text = progress_text(view)
    assert len(text) <= MESSAGE_LIMIT
    assert "running for" in text


def test_answer_attaches_charts_and_lists_what_does_not_fit() -> None:
    view = _run_view("ok\n")
    view.apply(ExecutionFinished(Status.OK, 120))
    chart = Artifact(
        "chart-1.png", 5, "image/png", "published", "https://x/c", True, content=b"PNG.."
    )
    big = Artifact("big.csv", 50, "text/csv", "published", "https://x/big", content=b"x" * 50)
    gone = Artifact("lost.txt", 3, "text/plain", "failed", reason="storage is down")
    view.apply(ArtifactsPublished([chart, big, gone]))
    view.apply(Answer("Here you go."))
    messages = answer_messages(view, upload_limit=20)
    assert messages[0].files == [("chart-1.png", b"PNG..")]
    text = "\n".join(m.content for m in messages)
    assert "Here you go." in text
    assert "[big.csv](https://x/big)" in text
    assert "lost.txt" in text
    assert "storage is down" in text


def test_long_output_and_code_go_as_files() -> None:
    view = _run_view("y" * 10_000, code="z = 1\n" * 400)
    view.apply(ExecutionFinished(Status.OK, 10))
    view.apply(Answer("Done."))
    names = [name for name, _ in answer_messages(view, 10_000_000)[0].files]
    assert names == ["code.py", "output.txt"]


def test_a_failure_is_the_answer() -> None:
    view = TurnView()
    view.apply(Failure("The model is not available right now (HTTP 500)."))
    assert answer_messages(view, 1000)[0].content.startswith("❌ The model is not available")


def test_long_answers_are_split_for_discord() -> None:
    view = TurnView()
    view.apply(Answer("word " * 2000))
    messages = answer_messages(view, 1000)
    assert len(messages) >= 5
    assert all(len(m.content) <= MESSAGE_LIMIT for m in messages)


def test_thread_names() -> None:
    assert thread_name("```py\nplot the sales by month\n```") == "plot the sales by month"
    assert thread_name("```print(6 * 7)```") == "print(6 * 7)"
    assert thread_name("\n\nplot the sales by month") == "plot the sales by month"
    assert len(thread_name("x" * 500)) == 90
    assert thread_name("") == "Cellmate"


def test_allowlists() -> None:
    rules = AccessRules(channels=frozenset({"10"}), roles=frozenset({"5"}), dms=False)
    assert allowed(rules, Place("u", "g", "10", roles=["5"]))
    assert not allowed(rules, Place("u", "g", "11", roles=["5"]))
    assert not allowed(rules, Place("u", "g", "10", roles=["6"]))
    assert not allowed(rules, Place("u", dm=True))
    assert allowed(AccessRules(), Place("anyone", dm=True))


def test_seen_ids() -> None:
    seen = Seen(size=2)
    assert seen.first_time("a")
    assert not seen.first_time("a")
    assert seen.first_time("b")
    assert seen.first_time("c")
    assert seen.first_time("a")  # forgotten after two newer ids
