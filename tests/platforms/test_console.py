"""`cellmate chat` as people and scripts use it: through a pipe and a pseudo-terminal."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bench.standins.ports import free_port
from tests.support.links import fetch
from tests.support.platforms import cli_environment

pytestmark = pytest.mark.docker


async def chat_through_a_pipe(stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_piped_messages_with_a_model_and_an_attachment(
    model: ScriptedModel, tmp_path: Path
) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("month,revenue\n1,10\n2,30\n")
    model.script(
        runs(
            "import pandas as pd, matplotlib.pyplot as plt\n"
            "pd.read_csv('sales.csv').plot()\n"
            "plt.show()\n"
            "total = 40"
        ),
        says("Revenue rose from 10 to 30."),
        runs("total"),
        says("The total is 40."),
    )
    messages = f"/attach {data}\n\nplot the sales\n\nwhat is the total?\n\n/files\n\n/export\n"
    code, out, err = await chat_through_a_pipe(
        messages,
        cli_environment(
            tmp_path / "data", OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="k", OPENAI_MODEL="m"
        ),
    )
    assert code == 0, err
    assert "Attached sales.csv (24 B); it goes with your next message." in out
    assert "Revenue rose from 10 to 30." in out
    chart_lines = [line for line in out.splitlines() if line.startswith("📎 chart-1.png")]
    assert len(chart_lines) == 1
    chart = Path(chart_lines[0].split(": ", 1)[1].removeprefix("file://"))
    assert (await asyncio.to_thread(chart.read_bytes)).startswith(b"\x89PNG")
    assert "Out: 40" in out
    assert "The total is 40." in out
    assert "sales.csv (24 B)" in out
    exported = [line for line in out.splitlines() if line.startswith("Exported the session to ")]
    notebook = Path(exported[0].removeprefix("Exported the session to "))
    assert await asyncio.to_thread(notebook.is_file)
    assert model.requests[0]["model"] == "m"


async def test_piped_code_without_a_model(tmp_path: Path) -> None:
    code, out, err = await chat_through_a_pipe(
        "```python\nfor i in range(3):\n\n    print('line', i)\n```\n\nhello there\n",
        cli_environment(tmp_path),
    )
    assert code == 0, err
    assert "line 0\nline 1\nline 2\n" in out
    assert "✓ ok in" in out
    assert "No model is configured" in out


async def test_piped_chat_shows_hostile_output_safely_and_goes_on_after_odd_names(
    tmp_path: Path,
) -> None:
    hostile = (
        "```python\n"
        "import time\n"
        "open(b'/mnt/data/bad\\xff\\x1b[2J.txt', 'wb').write(b'x')\n"
        "open('/mnt/data/x\\n\\u2713 ok in 0.1 s', 'w').write('y')\n"
        "print('one\\x1b]52;c;aGk=\\x07two\\x1b', end='', flush=True)\n"
        "time.sleep(0.5)\n"
        "print('[2Jthree\\x9b?25lfour\\rfive\\x1bc')\n"
        "```\n\n"
        "```python\nprint('second message ran')\n```\n\n"
        "/files\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cli_environment(tmp_path),
    )
    raw, err = await asyncio.wait_for(process.communicate(hostile.encode()), 300)
    assert process.returncode == 0, err.decode()
    out = raw.decode("utf-8")  # strict: an undecodable byte would fail here
    assert not set(out) & {"\x1b", "\r", "\x07", *map(chr, range(0x80, 0xA0))}
    lines = out.splitlines()
    assert "onetwothreefour" in lines
    assert "five" in lines
    assert "second message ran" in lines
    assert "bad\\xff\\x1b[2J.txt (1 B)" in lines  # /files, one line, escaped
    assert "x\\n✓ ok in 0.1 s (1 B)" in lines
    assert "failed" not in out


def test_ctrl_c_stops_a_runaway_turn_in_a_terminal(tmp_path: Path) -> None:
    pid, terminal = pty.fork()
    if pid == 0:  # the child: the console on a real pseudo-terminal
        os.execvpe(sys.executable, [sys.executable, "-m", "bot", "chat"], cli_environment(tmp_path))  # noqa: S606
    seen = b""

    def expect(marker: str, seconds: float = 120) -> None:
        """Read the terminal until `marker` shows, then forget what was read."""
        nonlocal seen
        deadline = time.monotonic() + seconds
        while marker.encode() not in seen:
            assert time.monotonic() < deadline, f"no {marker!r} in {seen[-2000:]!r}"
            ready, _, _ = select.select([terminal], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(terminal, 4096)
                except OSError:
                    break
        seen = seen[seen.find(marker.encode()) + len(marker) :]

    try:
        expect("you> ")
        os.write(terminal, b"/run x = 5\r")
        expect("✓ ok in")
        expect("you> ")
        os.write(terminal, b"/run import time; time.sleep(600)\r")
        expect("── output ──")
        time.sleep(1)
        os.write(terminal, b"\x03")  # Ctrl-C
        expect("The run was stopped on request.", 30)
        expect("you> ", 30)
        os.write(terminal, b"/run print(x)\r")  # the kernel kept its state
        expect("5\r\n", 30)
        expect("you> ", 30)
        os.write(terminal, b"/quit\r")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(terminal)


async def test_local_links_are_served_while_the_chat_runs(tmp_path: Path) -> None:
    port = free_port()
    env = cli_environment(
        tmp_path,
        CELLMATE_STORAGE_PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
        CELLMATE_HTTP_PORT=str(port),
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(b"```python\nopen('report.csv', 'w').write('a,b\\n1,2\\n')\n```\n\n")
        await process.stdin.drain()
        async with asyncio.timeout(120):
            while not (line := (await process.stdout.readline()).decode()).startswith(
                "📎 report.csv"
            ):
                assert line, "the chat ended without publishing report.csv"
        link = line.split(": ", 1)[1].strip()
        assert link.startswith(f"http://127.0.0.1:{port}/a/")  # stable: never expires
        got = await fetch(link)  # redirected to a freshly signed /files/ link
        assert (got.status, got.body) == (200, b"a,b\n1,2\n")
        assert (await fetch(link[:-2] + "xx")).status == 404  # an id the bot did not make
    finally:
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 60)
