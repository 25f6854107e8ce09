"""Background runs in the console's terminal, as its person sees them: /keep typed while a run
goes on sends it to the background (the turn ends, the chat takes the next message, and the
run's output and a line saying it ended are printed when it ends); /stop ends it there; a
line typed while the turn runs is the next message once the turn has ended; the code's own
questions still get the lines typed after they ask; `/run --background` goes there at once,
and what it prints beside the prompt starts on a line of its own; a run that goes on a while
says how to stop it or keep it running; code that waits for the run in the background says
so, and /beside runs it now beside that run (with nothing waiting, /beside says why). The
real console reading
a terminal's lines (`run_interactive`, here from a pipe the test types into), on the fake
sandbox (no Docker), without a model (code runs directly)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pty
import termios
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.service import NOTHING_TO_RUN_BESIDE
from bot.platforms import console_reply
from bot.platforms.console import (
    HELP,
    NOTHING_IN_BACKGROUND,
    NOTHING_TO_KEEP,
    NOTHING_WAITS,
    RUNNING_BESIDE,
    WAITING_HINT,
    Console,
    run_interactive,
    run_piped,
)
from bot.sandbox_words import BESIDE_NOTE
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend
from tests.support.later import HANG, QUICK, SLOW, slow_backend
from tests.support.prompts import ASK_NAME, ASKING
from tests.support.screen import Screen

WENT = "⏩ went on in the background"
ENDED = "Your background run ended: "
HINT = "⌛ Still running: Ctrl-C stops it; /keep lets it go on in the background."
NO_MODEL = "No model is configured"


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    """A limit no run here reaches: only /keep or --background send a run away."""
    return SandboxLimits(timeout_s=30, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    script = slow_backend().script
    assert isinstance(script, dict)
    return FakeBackend({**script, **ASKING})


class Terminal:
    """The console's person at a terminal: lines typed into the console's input, a
    pseudo-terminal's (its line discipline sends each line when Enter is pressed) or a
    pipe's (lines may arrive together, or split)."""

    def __init__(self, conversations: Conversations, tmp_path: Path, kind: str) -> None:
        self.conversations = conversations
        self.screen = Screen()
        self.console = Console(conversations, self.screen, tmp_path / "exports")
        if kind == "pty":
            self.typing, self.reading = pty.openpty()
            attributes = termios.tcgetattr(self.reading)
            attributes[3] &= ~termios.ECHO  # what is typed is not read back by anyone here
            termios.tcsetattr(self.reading, termios.TCSANOW, attributes)
        else:
            self.reading, self.typing = os.pipe()
        self.kind = kind
        self.chat: asyncio.Task[None] | None = None
        self.seen = 0
        """How far the test has read the screen."""

    def open(self) -> None:
        self.chat = asyncio.get_running_loop().create_task(
            run_interactive(self.console, "banner", self.reading)
        )

    def type(self, line: str) -> None:
        os.write(self.typing, f"{line}\n".encode())

    async def shows(self, text: str) -> str:
        """Wait until `text` is printed after what the test saw last; what was printed up to
        its end, which the test has now seen."""
        start = self.seen
        self.seen = await self.screen.wait_for(text, start)
        return self.screen.getvalue()[start : self.seen]

    async def prompt(self) -> None:
        """Wait for the console to ask for the next message."""
        await self.shows("you> ")

    async def quit(self, line: str = "/quit") -> None:
        self.type(line)
        await self.ended()

    def end_input(self) -> None:
        """Ctrl-D at a terminal; a pipe's writer closes it."""
        if self.kind == "pty":
            os.write(self.typing, b"\x04")
        else:
            os.close(self.typing)
            self.typing = -1

    async def ended(self) -> None:
        assert self.chat is not None
        async with asyncio.timeout(10):
            await self.chat

    def close(self) -> None:
        if self.chat is not None:
            self.chat.cancel()
        for fd in (self.typing, self.reading):
            if fd >= 0:
                os.close(fd)


@pytest.fixture(params=["pty", "pipe"])
async def terminal(
    fake_executor: Executor,
    make_agent: Callable[..., Agent],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[..., Terminal]]:
    made: list[Terminal] = []

    def make(background_max_s: float = 20) -> Terminal:
        agent = make_agent(fake_executor, None, tmp_path, timeout=5)
        conversations = Conversations(agent, background_max_s=background_max_s)
        made.append(Terminal(conversations, tmp_path, request.param))
        made[-1].open()
        return made[-1]

    yield make
    for opened in made:
        background = opened.conversations.background
        await background.close(grace_s=5)
        assert not background.runs
        if opened.chat is not None:
            opened.chat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await opened.chat
        opened.close()


async def test_keep_sends_the_run_away_and_the_chat_goes_on_until_stop_ends_it(
    terminal: Callable[..., Terminal],
) -> None:
    person = terminal()
    await person.shows(HELP)
    assert "/keep lets its run go on in the background" in HELP
    await person.prompt()
    person.type(f"/run {HANG}")
    await person.shows("waiting\n")
    person.type("/keep")
    went = await person.shows(WENT)
    await person.shows("you> ")  # the turn is over
    assert "⏳ This run goes on in the background" in person.screen.getvalue()[-2000:]
    assert "Stopping" not in went
    (stop_key,) = person.conversations.background.runs

    # The chat takes the next message while the run goes on.
    person.type("hello")
    answered = await person.shows(NO_MODEL)
    assert ENDED not in answered
    assert stop_key in person.conversations.background.runs
    await person.prompt()

    # /stop at the prompt ends the run in the background; its end is printed, then the
    # prompt again, as it was printed over.
    person.type("/stop")
    ended = await person.shows(ENDED)
    assert "Stopping the run in the background …" in ended
    assert "The run was stopped on request." in ended
    after = await person.shows("you> ")
    assert after.startswith("killed after ")
    assert after.endswith(" Its output is in the message above.\nyou> ")
    await person.quit()


async def test_a_kept_runs_output_and_end_are_printed_when_it_ends(
    terminal: Callable[..., Terminal], fake_backend: FakeBackend
) -> None:
    person = terminal()
    await person.prompt()
    person.type(f"/run {SLOW}")
    await person.shows("step 0\n")
    person.type("/keep")
    turn = await person.shows(WENT)
    assert "step 4" not in turn
    await person.prompt()
    shown = await person.shows(ENDED)
    assert "step 4\n" in shown
    assert "✓ ok in" in shown
    ended = await person.shows("\n")
    assert ended.startswith("it finished in ")
    assert [code.strip() for code in fake_backend.runs] == [SLOW]  # it ran once
    await person.quit()


async def test_a_line_typed_while_a_turn_runs_is_the_next_message(
    terminal: Callable[..., Terminal],
) -> None:
    person = terminal()
    await person.prompt()
    person.type(f"/run {SLOW}")
    await person.shows("step 0\n")
    person.type(f"/run {QUICK}")  # waits for the turn
    person.type("/keep")  # acts at once
    went = await person.shows(WENT)
    assert "42" not in went
    # Once the turn is over, the line typed meanwhile is the next message: its code waits for
    # the run in the background (one cell at a time), then runs.
    follow = await person.shows(f"you> /run {QUICK}\n")
    assert "step 4" not in follow
    since = person.seen
    waited = await person.shows("42\n")
    assert console_reply.WAITS_BEHIND in waited
    assert "step 4\n" in waited
    await person.screen.wait_for(ENDED, since)  # before or after the 42: either may be first
    await person.quit()


async def test_the_codes_question_gets_the_line_typed_after_it_asks(
    terminal: Callable[..., Terminal],
) -> None:
    person = terminal()
    await person.prompt()
    person.type("```python")
    person.type(ASK_NAME)
    person.type("```")
    await person.shows("⌨️ The code asks for input:\nName: ")
    person.type("Ada")
    await person.shows("⌨️ you answered: Ada\n")
    assert "Ada\n" in await person.shows("✓ ok in")  # what the code printed
    await person.prompt()
    await person.quit()


async def test_run_background_in_the_terminal_goes_at_once(
    terminal: Callable[..., Terminal],
) -> None:
    person = terminal()
    await person.prompt()
    person.type(f"/run --background {SLOW}")
    turn = await person.shows(WENT)
    assert "step 4" not in turn
    await person.prompt()  # the turn did not wait for the run
    shown = await person.shows(ENDED)
    assert "step 4\n" in shown
    assert "✓ ok in" in shown
    await person.shows("you> ")  # the prompt again, below what was printed over it
    # What the run printed after the prompt starts on a line of its own (what follows a
    # prompt on its line is only what the person typed, which their terminal shows).
    lines = person.screen.getvalue().splitlines()
    glued = [line for line in lines if line.startswith(("you> step", "you> Your", "you> ✓"))]
    assert glued == []
    await person.quit()


async def test_a_run_that_goes_on_says_how_to_stop_or_keep_it(
    terminal: Callable[..., Terminal], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_reply, "HINT_AFTER_S", 0.3)
    person = terminal()
    await person.prompt()
    person.type(f"/run {QUICK}")
    quick = await person.shows("you> ")
    assert "42\n" in quick
    assert "Still running" not in quick  # a run that ends at once gets no hint
    person.type(f"/run {HANG}")
    await person.shows(HINT)
    person.type("/stop")  # as Ctrl-C: the running turn stops
    stopped = await person.shows("you> ")
    assert "Stopping …" in stopped
    assert "The run was stopped on request." in stopped
    assert not person.conversations.background.runs
    await person.quit()


async def test_without_background_runs_the_hint_names_only_ctrl_c(
    terminal: Callable[..., Terminal], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_reply, "HINT_AFTER_S", 0.3)
    person = terminal(background_max_s=0)
    await person.prompt()
    person.type(f"/run {HANG}")
    hinted = await person.shows("⌛ Still running: Ctrl-C stops it.\n")
    assert "/keep" not in hinted.splitlines()[-1]
    person.type("/keep")
    await person.shows("✗ Runs cannot go on in the background here")
    person.console.stop()  # Ctrl-C
    await person.shows("The run was stopped on request.")
    await person.quit()


async def test_keep_and_stop_with_nothing_running_say_so(
    terminal: Callable[..., Terminal],
) -> None:
    person = terminal()
    await person.prompt()
    person.type("/keep")
    assert NOTHING_TO_KEEP in await person.shows("you> ")
    person.type("/stop")
    assert NOTHING_IN_BACKGROUND in await person.shows("you> ")
    await person.quit()
    # Through a pipe too: a piped /keep finds no turn running.
    start = person.screen.tell()
    await run_piped(person.console, io.StringIO("/keep\n"))
    assert person.screen.getvalue()[start:] == NOTHING_TO_KEEP + "\n"


async def test_the_end_of_input_at_the_prompt_ends_the_chat(
    terminal: Callable[..., Terminal],
) -> None:
    person = terminal()
    await person.prompt()
    person.type(f"/run {QUICK}")
    assert "42\n" in await person.shows("you> ")
    person.end_input()
    await person.ended()


async def test_beside_runs_code_that_waits_for_the_background_run_now(
    terminal: Callable[..., Terminal], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_reply, "HINT_AFTER_S", 0.3)
    person = terminal()
    await person.shows(HELP)
    assert "/beside runs it now" in HELP
    await person.prompt()
    person.type(f"/run --background {HANG}")
    await person.shows(WENT)
    went = await person.shows("you> ")
    # Said as the console does it: printed here, not posted, and nobody is mentioned.
    assert "⏳ This run goes on in the background (up to 20 s in all)" in went
    assert "its output is printed here as it comes" in went
    assert "mentioned" not in went
    (stop_key,) = person.conversations.background.runs

    # The next code waits for it: the console says so in its own words, and how to run it
    # now; a while later, that it still waits.
    person.type(f"/run {QUICK}")
    waits = await person.shows(WAITING_HINT)
    assert console_reply.WAITS_BEHIND in waits
    assert "button" not in waits  # no buttons here
    assert "Run beside" not in waits
    assert "42" not in waits

    # /beside runs it now, in a second kernel, while the run in the background goes on.
    since = person.seen
    person.type("/beside")
    ran = await person.shows(BESIDE_NOTE)
    await person.screen.wait_for(RUNNING_BESIDE, since)  # before or after it ran
    assert "42\n" in ran
    await person.prompt()
    assert stop_key in person.conversations.background.runs
    person.type("/stop")
    await person.shows(ENDED)
    await person.quit()


async def test_beside_with_nothing_waiting_says_why(terminal: Callable[..., Terminal]) -> None:
    person = terminal()
    await person.prompt()
    person.type("/beside")  # no turn runs
    assert NOTHING_WAITS in await person.shows("you> ")
    person.type(f"/run {HANG}")
    await person.shows("waiting\n")
    person.type("/beside")  # a turn runs, but nothing runs in the background
    await person.shows(f"✗ {NOTHING_TO_RUN_BESIDE}")
    person.type("/stop")
    stopped = await person.shows("you> ")
    assert "The run was stopped on request." in stopped
    assert not person.conversations.background.runs
    await person.quit()
