"""Workspaces with the real kernel under runc and runsc: variables of every common kind
(a DataFrame, a function and a class defined in the session, plain data) and files in
folders survive the end of a session and a restart; what cannot be pickled, and what is
past the cap, is named; another conversation never sees them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.sandbox_words import restored, spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, Status
from executor.session import Restore
from tests.integration.conftest import RUNTIMES
from tests.support.workspaces import local_store, saving_executor

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

SECRET = b"w" * 32

WORK = """
import os, socket, pandas as pd
df = pd.DataFrame({'city': ['Oslo', 'Lima'], 'sales': [3, 4]})
def double(v):
    return v * 2
class Box:
    def __init__(self, item):
        self.item = item
box = Box('kept')
numbers = list(range(5))
conn = socket.socket()
handle = open('/tmp/scratch.txt', 'w')
lines = (n for n in range(3))
huge = bytearray(3_000_000)
os.makedirs('out/charts', exist_ok=True)
open('out/charts/summary.txt', 'w').write('in a folder')
df.to_csv('sales.csv', index=False)
"""

CHECK = """
print(df.sales.sum(), double(21), box.item, numbers[-1])
print(open('out/charts/summary.txt').read(), open('sales.csv').read().splitlines()[0])
names = globals()
print(sorted(n for n in ('conn', 'handle', 'lines', 'huge', 'os', 'pd', 'box') if n in names))
"""


@pytest.fixture
def store(tmp_path: Path) -> StoredWorkspaces:
    return local_store(tmp_path, SECRET)


executor = saving_executor


async def test_a_workspace_survives_an_idle_end_and_a_restart(
    runtime: str, store: StoredWorkspaces
) -> None:
    async with executor(runtime, store, idle_timeout_s=0.5) as first:
        session = first.session("conv-a")
        made = spoken(await session.run(WORK))
        assert made.status is Status.OK, made.message
        await asyncio.sleep(0.6)
        await first.sessions.reap()  # the idle session ends: its workspace is saved
        await asyncio.gather(*first.sessions._saving.values())
        assert first.sessions.active == []

        back = spoken(await session.run(CHECK))
        assert back.status is Status.OK, back.message
        assert back.stdout == "7 42 kept 4\nin a folder city,sales\n['box']\n"
        assert back.message.startswith(
            "This is a new session (the previous one was idle for 0.5 s). Restored your "
            "workspace from a moment ago: "
        )
        for name in (
            "df",
            "double",
            "Box",
            "box",
            "numbers",
            "sales.csv",
            "out/charts/summary.txt",
        ):
            assert name in back.message
        for missing in (
            "conn (an open connection)",
            "handle (an open file)",
            "lines (a running generator)",
            "os (a module: import it again)",
            "huge (too large",
        ):
            assert missing in back.message

        other = spoken(await first.session("conv-b").run("print('df' in dir(), os.listdir('.'))"))
        assert other.error is not None  # not even `os` is there: nothing of conv-a
        assert "Restored" not in other.message

    async with executor(runtime, store) as second:  # the first one saved conv-a on exit
        again = spoken(await second.session("conv-a").run("print(double(df.sales.max()))"))
        assert again.status is Status.OK, again.message
        assert again.stdout == "8\n"
        assert again.message.startswith("Restored your workspace from a moment ago: ")


async def test_a_session_that_made_room_for_another_comes_back(
    runtime: str, store: StoredWorkspaces
) -> None:
    async with executor(runtime, store, max_live=1) as ex:
        made = await ex.session("conv-a").run("import pandas as pd\na = pd.Series([1, 2, 3])")
        assert made.status is Status.OK, made.message
        other = await ex.session("conv-b").run("b = 'only b'\nprint('a' in dir())")
        assert other.stdout == "False\n"
        back = spoken(await ex.session("conv-a").run("print(a.sum(), 'b' in dir())"))
        assert back.stdout == "6 False\n"
        assert "idle while another conversation needed a sandbox). Restored your" in back.message
        assert "pd (a module: import it again)" in back.message


async def test_a_kernel_that_tampers_with_the_snapshot_cannot_overfill_it(
    runtime: str, store: StoredWorkspaces
) -> None:
    # The user's code owns the kernel: it can replace what the snapshot uses. The runner
    # reads no more than the cap of what the kernel wrote, and the host caps the rest.
    async with executor(runtime, store, idle_timeout_s=0.5) as ex:
        session = ex.session("tamper")
        made = await session.run(
            "import pickle\n"
            "pickle.dump = lambda obj, out, *a, **k: out.write(b'0' * 10_000_000)\n"
            "x = 1"
        )
        assert made.status is Status.OK, made.message
        await asyncio.sleep(0.6)
        await ex.sessions.reap()
        await asyncio.gather(*ex.sessions._saving.values())
        after = spoken(await session.run("print('x' in globals())"))
        assert after.stdout == "False\n"
        assert "Your workspace could not be saved when the last session ended" in after.message
        assert "larger than the cap" in after.message


PAYLOAD = """
class Payload:
    def __reduce__(self):
        return (exec, ("open('/mnt/data/ran-at-restore', 'w').write('ran')",))
payload = Payload()
open('kept.txt', 'w').write('a file')
"""
RAN = "import os\nprint(os.path.exists('/mnt/data/ran-at-restore'), open('kept.txt').read())"


async def _saved_payload(ex: Executor, key: str) -> None:
    made = spoken(await ex.session(key).run(PAYLOAD))
    assert made.status is Status.OK, made.message
    await asyncio.sleep(0.6)
    await ex.sessions.reap()  # the idle session ends: the pickle is saved
    await asyncio.gather(*ex.sessions._saving.values())


@pytest.mark.parametrize("runtime", RUNTIMES)  # a rule against hostile code: both runtimes
async def test_a_pickle_that_runs_code_when_loaded_never_runs_with_files_only(
    runtime: str, store: StoredWorkspaces
) -> None:
    """A variable whose `__reduce__` is (exec, (code,)) runs that code when the workspace is
    loaded: with files only (the policy off), neither /restore nor the next run loads it."""
    async with executor(runtime, store, idle_timeout_s=0.5) as ex:
        await _saved_payload(ex, "conv-off")
        done = await ex.session("conv-off").restore(Restore.FILES)
        assert done.withheld == ("Payload", "payload")
        assert "kept.txt" in restored(done)
        assert await ex.session("conv-off").info("ran-at-restore") is None
        after = spoken(await ex.session("conv-off").run(RAN, restore=Restore.FILES))
        assert after.stdout == "False a file\n", after.message
        assert "its variables were not loaded: Payload, payload" in after.message
        again = await ex.session("conv-off").restore(Restore.VARIABLES)
        assert "at most once per session" in restored(again)
        assert await ex.session("conv-off").info("ran-at-restore") is None

        # Where code may run, the same pickle does run on loading: the check above is real.
        await _saved_payload(ex, "conv-auto")
        loaded = await ex.session("conv-auto").run(RAN, restore=Restore.VARIABLES)
        assert loaded.stdout == "True a file\n", loaded.message


SLOW = """
import time
class Slow:
    def __reduce__(self):
        time.sleep(600)
        return (int, ())
slow = Slow()
"""


async def test_shutdown_saves_every_session_at_once_and_a_slow_pickle_loses_only_its_own(
    runtime: str, store: StoredWorkspaces
) -> None:
    grace = 15.0
    async with executor(runtime, store, shutdown_save_s=grace) as first:
        made = await first.session("conv-slow").run(SLOW)
        assert made.status is Status.OK, made.message
        for key in ("conv-a", "conv-b"):
            made = await first.session(key).run(f"x = {key!r}")
            assert made.status is Status.OK, made.message
        started = asyncio.get_running_loop().time()
    took = asyncio.get_running_loop().time() - started
    assert took < grace + 20, took  # one deadline for all, plus removing the sandboxes
    async with executor(runtime, store) as second:
        for key in ("conv-a", "conv-b"):
            back = await second.session(key).run("print(x)")
            assert back.stdout == f"{key}\n", back.message
        slow = await second.session("conv-slow").run("print('slow' in dir())")
        assert slow.stdout == "False\n", slow.message
