"""What a console user sees: the real `cellmate chat` front end (messages read from a pipe,
as `run_piped` reads them, and Ctrl-C's stop) with the scripted model, on the fake sandbox
(no Docker)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.standins.openai_server import Reply, ScriptedModel, fails, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.platforms.console import Console, run_piped
from executor import Executor, SandboxLimits
from executor.fake_backend import FakeBackend, FakeRun, image, stdout
from tests.support.prompts import ASK_HIDDEN, ASK_NAME, ASKING, HIDDEN_ANSWER, assert_kept_nowhere
from tests.support.screen import Screen

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SALES = b"month,sales\n1,10\n2,30\n3,20\n"
CHART = "df = pd.read_csv('sales.csv')\ndf.plot()"
HANG = "wait_forever()"


@pytest.fixture
def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(timeout_s=20, interrupt_grace_s=0.2)


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            "print(6 * 7)": FakeRun(outputs=[stdout("42\n")]),
            CHART: FakeRun(outputs=[stdout("plotted\n"), image(PNG)]),
            HANG: FakeRun(outputs=[stdout("waiting\n")], hang=True),
            "keep()": FakeRun(outputs=[stdout("kept\n")], files={"notes.txt": b"hi"}),
            "crash()": FakeRun(outputs=[stdout("going down\n")], kernel_dies=-9),
            "slow()": FakeRun(outputs=[stdout("first "), stdout("done\n")], delay_s=0.2),
            **ASKING,
        }
    )


class Chat:
    """The console on a fake terminal: what it printed, and messages piped into it."""

    def __init__(self, agent: Agent, tmp_path: Path) -> None:
        self.out = Screen()
        self.console = Console(Conversations(agent), self.out, tmp_path / "exports")

    async def pipe(self, *messages: str) -> str:
        """Pipe in messages (separated by blank lines); what was printed for them."""
        start = self.out.tell()
        await run_piped(self.console, io.StringIO("\n\n".join(messages) + "\n"))
        return self.out.getvalue()[start:]


@pytest.fixture
def chat(
    fake_executor: Executor, make_agent: Callable[..., Agent], model: ScriptedModel, tmp_path: Path
) -> Callable[..., Chat]:
    def make(use_model: bool = True) -> Chat:
        agent = make_agent(fake_executor, model if use_model else None, tmp_path, timeout=5)
        return Chat(agent, tmp_path)

    return make


def _answers(out: str, *finals: str) -> int:
    """How many of the printed lines are one of the turn-ending lines `finals`."""
    return sum(line in finals for line in out.splitlines())


# ── turns ──────────────────────────────────────────────────────────────────────────────────


async def test_an_attached_csv_and_a_message_run_the_models_code_with_a_chart_and_one_answer(
    chat: Callable[..., Chat], model: ScriptedModel, fake_backend: FakeBackend, tmp_path: Path
) -> None:
    data = tmp_path / "sales.csv"
    data.write_bytes(SALES)
    model.script(runs(CHART), says("Sales peaked in month 2."))
    out = await chat().pipe(f"/attach {data}", "plot the sales")
    assert "Attached sales.csv (27 B); it goes with your next message." in out
    assert "── running ─────────────────────────\n" + CHART + "\n" in out
    assert "plotted\n" in out
    assert "[image/png chart]" in out
    assert "✓ ok in" in out
    charts = [line for line in out.splitlines() if line.startswith("📎 chart-1.png")]
    assert len(charts) == 1
    chart = Path(charts[0].split(": ", 1)[1].removeprefix("file://"))
    assert await asyncio.to_thread(chart.read_bytes) == PNG
    assert out.splitlines()[-1] == "Sales peaked in month 2."
    assert _answers(out, "Sales peaked in month 2.") == 1
    (sandbox,) = fake_backend.live
    assert sandbox.files == {"sales.csv": SALES}


async def test_a_fenced_code_block_and_run_work_without_a_model(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    out = await chat(use_model=False).pipe(
        "```python\nprint(6 * 7)\n```", "/run print(6 * 7)", "hello there"
    )
    assert out.count("42\n") == 2
    assert out.count("✓ ok in") == 2
    assert "No model is configured" in out.splitlines()[-1]
    assert [code.strip() for code in fake_backend.runs] == ["print(6 * 7)", "print(6 * 7)"]


async def test_ctrl_c_stops_a_hanging_run_and_the_session_lives_on(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    console = chat(use_model=False)
    turn = asyncio.create_task(console.pipe(f"```python\n{HANG}\n```"))
    await console.out.wait_for("waiting")
    console.console.stop()  # what Ctrl-C calls in a terminal
    out = await asyncio.wait_for(turn, 10)
    assert "Stopping …" in out
    assert "The run was stopped on request." in out
    assert "■ killed" in out
    assert console.console.renderer is None
    again = await console.pipe("/run print(6 * 7)")
    assert "42\n" in again
    assert fake_backend.started == 1  # the same sandbox: the kernel kept its state


async def test_ctrl_c_while_the_model_thinks_ends_the_turn_with_one_message(
    chat: Callable[..., Chat], model: ScriptedModel
) -> None:
    model.script(Reply(content="too late", delay_s=1))
    console = chat()
    turn = asyncio.create_task(console.pipe("hi"))
    for _ in range(500):
        if model.requests:
            break
        await asyncio.sleep(0.01)
    console.console.stop()
    out = await asyncio.wait_for(turn, 10)
    assert out == "Stopping …\n✗ Stopped.\n"


async def test_ctrl_c_without_a_running_turn_does_nothing(chat: Callable[..., Chat]) -> None:
    console = chat(use_model=False)
    console.console.stop()
    assert console.out.getvalue() == ""


async def test_files_export_and_reset(
    chat: Callable[..., Chat], fake_backend: FakeBackend, tmp_path: Path
) -> None:
    console = chat(use_model=False)
    nothing = await console.pipe("/export")
    assert nothing == "Nothing to export yet: no code has run in this session.\n"
    out = await console.pipe("/run keep()", "/files", "/export")
    lines = out.splitlines()
    assert "notes.txt (2 B)" in lines
    exported = [line for line in lines if line.startswith("Exported the session to ")]
    assert len(exported) == 1
    path = Path(exported[0].removeprefix("Exported the session to "))
    notebook = json.loads(await asyncio.to_thread(path.read_text))
    assert [cell["source"].strip() for cell in notebook["cells"]][-1] == "keep()"
    reset = await console.pipe("/reset", "/files")
    assert reset == (
        "Forgot the conversation and restarted the session: its variables and its files in "
        "/mnt/data are gone.\nNo files in /mnt/data.\n"
    )
    assert not fake_backend.live  # the reset ended the sandbox


async def test_a_second_message_waits_for_the_first_turn_to_finish(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    """Today's behaviour: piped messages are answered one after the other, none refused."""
    out = await chat(use_model=False).pipe("/run slow()", "/run print(6 * 7)")
    assert out.index("first done\n") < out.index("42\n")
    assert out.count("✓ ok in") == 2
    assert [code.strip() for code in fake_backend.runs] == ["slow()", "print(6 * 7)"]


# ── errors ─────────────────────────────────────────────────────────────────────────────────


async def test_a_model_that_is_down_gets_one_clear_message(
    chat: Callable[..., Chat], model: ScriptedModel
) -> None:
    model.endless = fails(500)
    out = await chat().pipe("hi", "/run print(6 * 7)")
    failure = "✗ The model is not available right now (HTTP 500). Try again later."
    assert _answers(out, failure) == 1
    assert "42\n" in out  # the chat goes on


async def test_a_sandbox_that_cannot_start_gets_one_clear_message(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    fake_backend.unavailable = "the engine is down"
    out = await chat(use_model=False).pipe("/run print(6 * 7)")
    failures = [line for line in out.splitlines() if line.startswith("✗ ")]
    assert len(failures) == 1
    assert failures[0].startswith("✗ The sandbox could not run the code")
    assert "the engine is down" in failures[0]


async def test_a_kernel_death_is_reported_and_the_next_run_gets_a_new_kernel(
    chat: Callable[..., Chat], fake_backend: FakeBackend
) -> None:
    out = await chat(use_model=False).pipe("/run crash()", "/run print(6 * 7)")
    assert "going down\n" in out
    assert "■ killed in" in out
    assert "42\n" in out
    assert fake_backend.started == 2


# ── input() and getpass() ─────────────────────────────────────────────────────────────────


async def test_the_codes_input_is_asked_in_the_terminal_and_the_answer_reaches_it(
    chat: Callable[..., Chat], model: ScriptedModel
) -> None:
    model.script(runs(ASK_NAME), says("Hello, Ada."))
    out = await chat().pipe("ask my name", "Ada")
    assert "⌨️ The code asks for input:\nName: \n" in out
    assert "\nAda\n" in out  # what the code printed
    assert "⌨️ you answered: Ada\n" in out
    told = json.dumps(model.requests[-1]["messages"])
    assert "the user answered 'Ada'" in told
    assert out.splitlines()[-1] == "Hello, Ada."


async def test_a_getpass_answer_reaches_the_code_and_nothing_else(
    chat: Callable[..., Chat],
    model: ScriptedModel,
    fake_backend: FakeBackend,
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    model.script(runs(ASK_HIDDEN), says("Logged in."))
    console = chat()
    out = await console.pipe("log in", HIDDEN_ANSWER, "/export")
    assert "⌨️ The code asks for a password (getpass); it is not shown as you type." in out
    assert "\n••••\n" in out
    assert "⌨️ you answered: ••••\n" in out
    (sandbox,) = fake_backend.live
    assert sandbox.secrets == {HIDDEN_ANSWER}  # it reached the code
    told = json.dumps(model.requests[-1]["messages"])
    assert "the answer is hidden from you and from the chat" in told
    await assert_kept_nowhere(
        HIDDEN_ANSWER,
        shown=[out],
        model_requests=model.requests,
        logs=debug_logs.text,
        root=tmp_path,
    )


async def test_no_answer_to_input_gives_the_code_eof_and_says_so(
    chat: Callable[..., Chat], model: ScriptedModel
) -> None:
    model.script(runs(ASK_NAME), says("No name, then."))
    out = await chat().pipe("ask my name")  # the input ends: nothing more is typed
    assert "⌛ Nobody answered in time; the code's input() got no answer (EOFError)." in out
    assert "EOFError" in out
    assert "Nobody answered the code's input() ('Name:'), so it raised EOFError." in out
    assert _answers(out, "No name, then.") == 1
