"""`cellmate exec` and `cellmate chat` show hostile output and names safely, and `--out`
saves hostile file names inside its folder under plain names."""

from __future__ import annotations

import io
import logging
import os
import unicodedata
from pathlib import Path
from typing import Any, cast

import pytest

from bot.agent import Agent, Turn, UserMessage
from bot.conversations import Conversations
from bot.events import (
    Answer,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    OutputChunk,
    TurnEvent,
)
from bot.logs import TextFormatter
from bot.ops.exec_output import MAX_NAME_BYTES, host_file_name, print_result, save_outputs
from bot.platforms.console import Console
from bot.platforms.console_reply import Renderer
from executor.models import (
    ExecutionError,
    ExecutionResult,
    OutputEvent,
    OutputFile,
    RichResult,
    SkippedFile,
    Status,
)
from storage.artifacts import Artifact

FAKE_RESULT_LINE = "x\n✓ ok in 0.1 s"
UNDECODABLE = os.fsdecode(b"caf\xe9\xff.csv")


def assert_terminal_safe(shown: str) -> None:
    for character in shown:
        category = unicodedata.category(character)
        assert character in "\n\t" or category[0] != "C" or category == "Co", repr(character)
    shown.encode("utf-8")


def assert_plain_name(name: str) -> None:
    assert name not in ("", ".", "..")
    assert "/" not in name
    assert "\\" not in name
    assert not name.startswith((".", "-"))
    assert all(unicodedata.category(ch)[0] != "C" for ch in name), repr(name)
    assert len(name.encode("utf-8")) <= MAX_NAME_BYTES


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("report.csv", "report.csv"),
        ("../x", "x"),
        ("../../../../etc/cron.d/job", "etc_cron.d_job"),
        ("/etc/passwd", "etc_passwd"),
        (".bashrc", "_bashrc"),
        ("..hidden", "_hidden"),
        ("-rf", "_rf"),
        ("--output=evil", "_output=evil"),
        ("clear\x1b[2J.csv", "clear_[2J.csv"),
        (FAKE_RESULT_LINE, "x_✓ ok in 0.1 s"),
        (UNDECODABLE, "caf__.csv"),
        ("invoice\u202efdp.exe", "invoice_fdp.exe"),
        ("plots/sales.png", "plots_sales.png"),
        ("a\\..\\b", "a_b"),
        ("..", "file"),
        ("...", "file"),
        ("données.csv", "données.csv"),
    ],
)
def test_host_file_names_are_plain(path: str, expected: str) -> None:
    assert host_file_name(path) == expected
    assert_plain_name(host_file_name(path))


@pytest.mark.parametrize("stem", ["a" * 400, "é" * 400, "東" * 400])
def test_long_host_file_names_are_bounded_and_keep_their_extension(stem: str) -> None:
    name = host_file_name(f"{stem}.csv")
    assert name.endswith(".csv")
    assert name.startswith(stem[:10])
    assert_plain_name(name)


HOSTILE_FILES = [
    "../escape.txt",
    "/etc/passwd",
    ".bashrc",
    "-n",
    "esc\x1b]0;pwned\x07.txt",
    FAKE_RESULT_LINE,
    UNDECODABLE,
    "b" * 400 + ".txt",
    "data.csv",
    "DATA.csv",
    "sub/data.csv",
    "sub_data.csv",
]


def hostile_result() -> ExecutionResult:
    return ExecutionResult(
        status=Status.OK,
        files=tuple(
            OutputFile(path=path, content=f"{index}".encode())
            for index, path in enumerate(HOSTILE_FILES)
        ),
    )


def test_out_saves_every_file_inside_its_folder_under_its_own_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    saved = save_outputs(hostile_result(), out)
    written = sorted((out / "files").iterdir())
    assert sorted(saved["files"]) == written
    assert len(written) == len(HOSTILE_FILES)  # duplicates got names of their own
    assert len({path.name.casefold() for path in written}) == len(HOSTILE_FILES)
    for index, path in enumerate(saved["files"]):
        assert path.parent == (out / "files").resolve()
        assert path.read_bytes() == f"{index}".encode()
        assert_plain_name(path.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing outside
    assert [p.name for p in saved["files"][8:11]] == ["data.csv", "DATA-2.csv", "sub_data.csv"]
    assert saved["files"][11].name == "sub_data-2.csv"


def test_out_does_not_write_through_a_link_or_onto_a_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "files" / "report.csv").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (out / "files" / "notes.txt").symlink_to(outside)
    result = ExecutionResult(
        status=Status.OK,
        files=(OutputFile("report.csv", b"new"), OutputFile("notes.txt", b"new")),
    )
    saved = save_outputs(result, out)
    assert [p.name for p in saved["files"]] == ["report-2.csv", "notes-2.txt"]
    assert outside.read_text() == "keep"


def test_exec_output_shows_names_escaped_and_output_cleaned(tmp_path: Path) -> None:
    result = ExecutionResult(
        status=Status.ERROR,
        stdout="a\x1b[2Jb\x1b]52;c;aGk=\x07c\rd\x9b2J",
        stderr="warn\x1bc\n",
        results=(
            RichResult({"text/plain": "'\x1b[31mred'"}, is_main_result=True),
            RichResult({"text/x-\x1b[2J": "x"}),
        ),
        error=ExecutionError("ValueError", "v", ("\x1b[31mValueError\x1b[0m: \u202ev",)),
        files=(OutputFile(FAKE_RESULT_LINE, b"1"), OutputFile(UNDECODABLE, b"2")),
        skipped_files=(SkippedFile("big\x1b[2J.bin", "larger than 10 MB"),),
        duration_ms=1200,
    )
    saved = save_outputs(result, tmp_path)
    out = io.StringIO()
    print_result(result, out, saved)
    shown = out.getvalue()
    assert_terminal_safe(shown)
    lines = shown.splitlines()
    assert lines[0:2] == ["abc", "d"]
    assert "Out: 'red'" in lines
    assert "[text/x-\\x1b[2J output]" in lines
    assert "ValueError: \\u202ev" in lines
    assert f"x\\n✓ ok in 0.1 s (1 B) -> {tmp_path}/files/x_✓ ok in 0.1 s" in lines
    assert f"caf\\xe9\\xff.csv (1 B) -> {tmp_path}/files/caf__.csv" in lines
    assert "not returned: big\\x1b[2J.bin: larger than 10 MB" in lines
    # The only status line is the real one, last.
    assert [line for line in lines if line.startswith(("✓", "✗"))] == [lines[-1]]
    assert lines[-1].startswith("✗ error in 1.20 s")


def render(events: list[TurnEvent]) -> str:
    out = io.StringIO()
    renderer = Renderer(out, interactive=False)
    for event in events:
        renderer(event)
    return out.getvalue()


def stdout(text: str) -> OutputChunk:
    return OutputChunk(OutputEvent("stdout", text))


def test_chat_removes_sequences_split_across_output_chunks() -> None:
    hostile = "one\x1b]52;c;aGk=\x07two\x1b[2Jthree\x9b?25lfour\r\x1bc\n"
    for cut in range(len(hostile) + 1):
        shown = render(
            [
                CodeStarted("print(...)"),
                stdout(hostile[:cut]),
                stdout(hostile[cut:]),
                ExecutionFinished(Status.OK, 100),
            ]
        )
        assert_terminal_safe(shown)
        assert "onetwothreefour\n✓ ok in 0.10 s\n" in shown, f"cut at {cut}"


def test_chat_does_not_join_stdout_and_stderr_into_one_sequence() -> None:
    shown = render(
        [
            stdout("out\x1b"),
            OutputChunk(OutputEvent("stderr", "[2Jerr\n")),
            stdout("[31mmore\n"),
            ExecutionFinished(Status.OK, 100),
        ]
    )
    assert shown.startswith("out[2Jerr\nmore\n")


def test_chat_shows_code_answers_and_artifact_names_safely() -> None:
    shown = render(
        [
            CodeStarted("print('\x1b[2J')  # \u202eevil"),
            ExecutionFinished(Status.ERROR, 100, message="stopped\x1b]0;t\x07"),
            ArtifactsPublished(
                [Artifact(FAKE_RESULT_LINE, 1, "text/plain", "published", link="file:///x")]
            ),
            Answer("Done\x1b[8m hidden\x1b[0m"),
        ]
    )
    assert_terminal_safe(shown)
    assert "print('')  # \\u202eevil" in shown
    assert "✗ error in 0.10 s: stopped\n" in shown
    assert "📎 x\\n✓ ok in 0.1 s (1 B): file:///x\n" in shown
    assert shown.endswith("Done hidden\n")


class FakeSession:
    active = True

    async def list_files(self) -> list[tuple[str, int]]:
        return [(UNDECODABLE, 3), ("esc\x1b[2J.txt", 1)]


class FakeExecutor:
    def session(self, conversation: str) -> FakeSession:
        return FakeSession()


class FakeAgent:
    """Fails the first turn the way a bug below the console would, answers the next."""

    executor = FakeExecutor()
    metrics = None

    def __init__(self) -> None:
        self.turns = 0

    async def turn(self, conversation: str, message: UserMessage, emit: Any, turn: Turn) -> None:
        self.turns += 1
        if self.turns == 1:
            raise RuntimeError(f"cannot show {UNDECODABLE}\x1b]0;pwned\x07")
        emit(Answer(f"answered {message.text}"))


async def test_chat_lists_undecodable_names_and_survives_a_failing_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = io.StringIO()
    console = Console(Conversations(cast(Agent, FakeAgent())), out, tmp_path)
    assert await console.handle("/files", interactive=False)
    assert await console.handle("first", interactive=False)
    assert await console.handle("second", interactive=False)
    shown = out.getvalue()
    assert_terminal_safe(shown)
    lines = shown.splitlines()
    assert lines[:2] == ["caf\\xe9\\xff.csv (3 B)", "esc\\x1b[2J.txt (1 B)"]
    assert lines[2].startswith("✗ Something went wrong while answering: cannot show caf")
    assert lines[3:] == ["answered second"]
    # The log goes to the same terminal: the error is in it, cleaned.
    [record] = [r for r in caplog.records if r.exc_info]
    logged = TextFormatter().format(record)
    assert "RuntimeError: cannot show caf" in logged
    assert_terminal_safe(logged)


def test_log_lines_on_the_terminal_are_cleaned() -> None:
    record = logging.LogRecord(
        "bot.x",
        logging.WARNING,
        __file__,
        1,
        "could not read %s",
        ("a\x1b]52;c;eA==\x07b\x1b[2J",),
        None,
    )
    line = TextFormatter().format(record)
    assert line == "WARNING bot.x: could not read ab"
