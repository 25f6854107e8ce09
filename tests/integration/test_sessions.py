"""Session mode with real containers: state that carries over, and every way a session ends."""

from __future__ import annotations

import asyncio
import time

import docker
import nbformat
import pytest

from bot.sandbox_words import spoken
from executor import Executor, InvalidInput, OutputEvent, SandboxLimits, Status, default_tag
from tests.integration.conftest import NO_POOL, TEST_INSTANCE

pytestmark = pytest.mark.docker


async def value(executor: Executor, key: str, expression: str) -> str:
    result = await executor.session(key).run(expression)
    assert result.status is Status.OK, (result.message, result.error)
    return result.results[-1].text


@pytest.mark.any_runtime
async def test_variables_and_files_carry_over(executor: Executor) -> None:
    session = executor.session("conversation-1")
    first = await session.run(
        "import pandas as pd\ndf = pd.DataFrame({'v': [1, 2, 3]})\ndf.to_csv('v.csv')"
    )
    assert first.status is Status.OK
    assert not first.session_restarted
    assert [f.path for f in first.files] == ["v.csv"]
    second = await session.run(
        "total = int(df['v'].sum()) + len(open('v.csv').read().splitlines())\ntotal"
    )
    assert second.results[-1].text == "10"
    assert second.files == ()  # nothing changed in this run
    third = await session.run("df['v'] *= 2\ndf.to_csv('v.csv')")
    assert [(f.path, f.content.decode().splitlines()[-1]) for f in third.files] == [
        ("v.csv", "2,6")
    ]


@pytest.mark.any_runtime
async def test_output_streams_while_the_code_runs(executor: Executor) -> None:
    arrivals: list[tuple[float, OutputEvent]] = []
    result = await executor.session("streaming").run(
        "import time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two')\n21 * 2",
        on_output=lambda event: arrivals.append((time.monotonic(), event)),
    )
    finished = time.monotonic()
    events = [event for _, event in arrivals]
    assert [(e.kind, e.text) for e in events if e.kind == "stdout"] == [
        ("stdout", "one\n"),
        ("stdout", "two\n"),
    ]
    assert any(e.kind == "result" and e.result and e.result.text == "42" for e in events)
    assert result.results[-1].text == "42"
    assert finished - arrivals[0][0] >= 1.0  # 'one' came a second before the end, not with it


async def test_stop_interrupts_and_keeps_state(executor: Executor) -> None:
    session = executor.session("stoppable")
    await session.run("kept = 'still here'")
    started = asyncio.Event()
    running = asyncio.create_task(
        session.run(
            "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.1)",
            on_output=lambda event: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 60)
    assert session.stop()
    stopped = await running
    assert stopped.status is Status.KILLED
    assert stopped.message == "The run was stopped on request."
    after = await session.run("kept")
    assert after.results[-1].text == "'still here'"
    assert not after.session_restarted
    assert not session.stop()  # nothing runs now


@pytest.mark.any_runtime
async def test_a_stop_set_before_the_run_starts_runs_nothing(executor: Executor) -> None:
    session = executor.session("stopped-early")
    stop = asyncio.Event()
    stop.set()  # pressed while the sandbox was still starting
    result = await session.run("open('/mnt/data/ran', 'w').write('yes')", stop=stop)
    assert result.status is Status.KILLED
    assert not result.files
    assert not await session.list_files()
    assert (await session.run("1 + 1")).results[-1].text == "2"


async def test_stop_freezes_code_that_ignores_it_and_the_session_restarts(
    executor: Executor,
) -> None:
    session = executor.session("stubborn")
    await session.run("pass")
    started = asyncio.Event()
    running = asyncio.create_task(
        session.run(
            "import signal, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "print('ignoring interrupts', flush=True)\n"
            "while True:\n"
            "    time.sleep(0.1)",
            on_output=lambda event: started.set(),
        )
    )
    # Stopped once the code runs (a new sandbox's cell that imports may first wait for the
    # warm-up, and a stop then ends it before it starts).
    await asyncio.wait_for(started.wait(), 60)
    assert session.stop()
    stopped = await running
    assert stopped.status is Status.KILLED
    assert "stopped on request" in stopped.message
    after = spoken(await session.run("1 + 1"))
    assert after.session_restarted
    assert after.message.startswith(
        "This is a new session (the previous run was stopped on request)"
    )
    assert after.results[-1].text == "2"


async def test_timeout_in_a_session_keeps_state(executor: Executor) -> None:
    session = executor.session("slow")
    await session.run("n = 7")
    slow = await session.run("import time\ntime.sleep(30)", timeout_s=2)
    assert slow.status is Status.TIMEOUT
    assert await value(executor, "slow", "n") == "7"


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", Status.KILLED, "kernel died"),
        ("import ctypes\nctypes.string_at(0)", Status.KILLED, "kernel died"),
        (
            "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))",
            Status.MEMORY,
            "ran out of memory",
        ),
    ],
)
async def test_a_dead_kernel_restarts_the_session_and_says_so(
    executor: Executor, code: str, status: Status, reason: str
) -> None:
    session = executor.session("fragile")
    await session.run("precious = 1")
    died = await session.run(code)
    assert died.status is status
    after = spoken(await session.run("'precious' in globals()"))
    assert after.session_restarted
    assert reason in after.message
    assert "earlier variables and files are gone" in after.message
    assert after.results[-1].text == "False"
    again = await session.run("1")
    assert not again.session_restarted


@pytest.mark.any_runtime
@pytest.mark.parametrize("how", ["removed", "killed"])
async def test_a_container_removed_from_outside_is_replaced(
    executor: Executor, docker_client: docker.DockerClient, how: str
) -> None:
    """At once, with the host not yet aware that it is gone: the next run's request goes to
    a sandbox that never takes it (no `Started`), so nothing of it ran, and it runs in a new
    sandbox."""
    session = executor.session("removed")
    await session.run("x = 1")
    (container,) = [
        c
        for c in docker_client.containers.list(
            filters={"label": f"cellmate.instance={TEST_INSTANCE}"}
        )
    ]
    if how == "removed":
        container.remove(force=True)
    else:
        container.kill()
    after = spoken(await session.run("print('recovered')"))
    assert after.status is Status.OK
    assert after.stdout == "recovered\n"
    assert after.session_restarted
    assert "its sandbox had stopped" in after.message


async def test_sessions_never_see_each_other(executor: Executor) -> None:
    alice, bob = executor.session("alice"), executor.session("bob")
    await alice.run("secret = 's3cr3t'\nopen('alice.txt', 'w').write(secret)")
    await alice.put_files({"upload.csv": b"private"})
    peek = await bob.run(
        "import os\nprint(sorted(os.listdir('/mnt/data')))\nprint('secret' in globals())"
    )
    assert peek.stdout == "[]\nFalse\n"
    assert await bob.list_files() == []
    assert await bob.get_file("alice.txt") is None
    assert await alice.get_file("alice.txt") == b"s3cr3t"


@pytest.mark.any_runtime
async def test_runs_on_one_session_queue_in_order(executor: Executor) -> None:
    session = executor.session("queue")
    await session.run("seen = []")
    runs = [
        session.run(f"import time\ntime.sleep(0.2)\nseen.append({i})\nlist(seen)") for i in range(4)
    ]
    results = await asyncio.gather(*runs)
    assert [r.results[-1].text for r in results] == ["[0]", "[0, 1]", "[0, 1, 2]", "[0, 1, 2, 3]"]


async def test_files_into_and_out_of_a_live_session(executor: Executor) -> None:
    session = executor.session("files")
    await session.put_files({"data.csv": b"a\n1\n2\n"})
    result = await session.run("import pandas as pd\nint(pd.read_csv('data.csv')['a'].sum())")
    assert result.results[-1].text == "3"
    await session.run(
        "import os\nos.makedirs('out', exist_ok=True)\nopen('out/r.txt', 'w').write('r')"
    )
    assert sorted(await session.list_files()) == [("data.csv", 6), ("out/r.txt", 1)]
    assert await session.get_file("out/r.txt") == b"r"
    assert await session.get_file("missing.txt") is None
    with pytest.raises(InvalidInput, match="relative to /mnt/data"):
        await session.get_file("../etc/passwd")
    with pytest.raises(InvalidInput, match="input file name"):
        await session.put_files({"../escape": b"x"})


async def test_a_link_written_by_code_is_never_followed(executor: Executor) -> None:
    session = executor.session("links")
    result = await session.run("import os\nos.symlink('/etc/passwd', 'passwd')")
    assert result.files == ()
    assert "a link" in result.skipped_files[0].reason
    assert await session.get_file("passwd") is None


@pytest.mark.any_runtime
async def test_export_as_a_notebook(executor: Executor) -> None:
    session = executor.session("export")
    await session.run("a = 20")
    await session.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\na + 22")
    exported = await session.export_notebook()
    assert exported is not None
    notebook = nbformat.from_dict(exported)
    nbformat.validate(notebook)
    assert [c.source for c in notebook.cells] == [
        "a = 20",
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\na + 22",
    ]
    outputs = notebook.cells[1].outputs
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert outputs[-1]["data"]["text/plain"] == "42"
    assert await executor.session("never-used").export_notebook() is None


@pytest.mark.any_runtime
async def test_idle_sessions_end_and_the_next_run_says_so(executor: Executor) -> None:
    executor.sessions.idle_timeout_s = 0.5
    session = executor.session("idle")
    await session.run("x = 1")
    await asyncio.sleep(1)
    await executor.sessions.reap()
    assert not session.active
    after = spoken(await session.run("'x' in globals()"))
    assert after.session_restarted
    assert "idle for 0.5 s" in after.message
    assert after.results[-1].text == "False"


@pytest.mark.any_runtime
async def test_closing_a_session_forgets_it_quietly(executor: Executor) -> None:
    session = executor.session("reset")
    await session.run("x = 1")
    await session.close()
    after = await session.run("'x' in globals()")
    assert after.results[-1].text == "False"
    assert not after.session_restarted


@pytest.mark.any_runtime
async def test_container_limits_cannot_change_per_session_run(executor: Executor) -> None:
    with pytest.raises(InvalidInput, match="container limits"):
        await executor.session("limits").run("1", memory_mb=4096)


# The first cell of a new sandbox, while the warm-up thread may still be importing: each
# way of importing waits for it (importing beside it could deadlock Python's import locks,
# or leave the user's output behind), and shows what it should. The warm-up's mark is there
# when the cell starts (`open` fails if not: the cell imports nothing to look).
WARMED = "open('/tmp/cellmate-warm').close()\n"
FIRST_CELLS = {
    "pyplot chart": (
        "import matplotlib.pyplot as plt\n" + WARMED + "plt.plot([1, 2], [3, 4]); plt.show()",
        "",
        "image/png",
    ),
    "inline backend, then pyplot": (
        "from matplotlib_inline import backend_inline\n"
        "import matplotlib.pyplot as plt\n" + WARMED + "print(plt.get_backend())",
        "module://matplotlib_inline.backend_inline\n",
        None,
    ),
    "a module already loaded": ("import os\n" + WARMED + "print(os.sep)", "/\n", None),
    "__import__": (WARMED + "__import__('pandas').DataFrame({'a': [1]})", "", "text/html"),
    "a magic": ("%matplotlib inline\n" + WARMED + "print('shown')", "shown\n", None),
}


@pytest.mark.any_runtime
@pytest.mark.warm_up
@pytest.mark.parametrize("name", list(FIRST_CELLS))
async def test_a_first_cell_that_imports_waits_for_the_warm_up_and_shows_its_output(
    executor: Executor, name: str
) -> None:
    code, stdout, mime = FIRST_CELLS[name]
    result = await executor.session(f"first-{len(name)}").run(code)
    assert result.status is Status.OK, (result.message, result.error)
    assert result.stdout == stdout
    assert result.stderr == ""
    if mime is not None:
        assert any(mime in r.data for r in result.results), result.results


WARM_UP_REPORT = (
    "import sys, threading\n"
    "warming = [t for t in threading.enumerate() if t.name == 'cellmate-warm-up']\n"
    "for t in warming: t.join(120)\n"
    "print(sorted(m for m in ['numpy', 'pandas', 'matplotlib'] if m in sys.modules))\n"
    "print(sorted(n for n in globals() if not n.startswith('_') and n not in "
    "('In', 'Out', 'get_ipython', 'exit', 'quit', 'open', 'sys', 'threading', 'warming', "
    "'t')))\n"
    "print(len(In))"
)


@pytest.mark.warm_up
async def test_a_new_session_warms_the_data_stack_up_and_shows_nothing(
    executor: Executor, runtime: str
) -> None:
    # The first run does not wait for the warm-up, which loads the data stack beside it:
    # all of it under runc; under gVisor, where pandas costs each sandbox ~30 MB, not pandas.
    result = await executor.session("fresh").run(WARM_UP_REPORT)
    loaded = "['matplotlib', 'numpy', 'pandas']" if runtime == "runc" else "['matplotlib', 'numpy']"
    assert result.stdout == f"{loaded}\n[]\n2\n"
    # Whatever was left out loads when the code asks for it, with its rich output.
    frame = await executor.session("fresh").run("import pandas as pd\npd.DataFrame({'a': [1]})")
    assert frame.status is Status.OK, (frame.message, frame.error)
    assert any("application/vnd.dataresource+json" in r.data for r in frame.results)


@pytest.mark.parametrize(
    ("preload", "loaded"),
    [("none", "[]"), ("pandas", "['numpy', 'pandas']"), ("numpy,pandas,matplotlib", None)],
)
async def test_the_preload_setting_chooses_what_a_new_sandbox_imports(
    preload: str, loaded: str | None
) -> None:
    # The runner reads the same setting under either runtime; runc keeps this quick.
    limits = SandboxLimits(preload=preload)
    async with Executor(
        default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL
    ) as executor:
        result = await executor.session("preload").run(WARM_UP_REPORT)
    # pandas imports numpy itself; matplotlib imports numpy too.
    assert result.stdout.splitlines()[0] == (loaded or "['matplotlib', 'numpy', 'pandas']")
