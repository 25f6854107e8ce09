"""R, JavaScript and TypeScript runs through `Session.run(language=...)` with the real kernels
under runc and runsc: state across runs, errors with their tracebacks as data, files in the
shared /mnt/data, a run's own env and folder, charts from R, the time limit and stop, and the
sandbox's hostile-input catalogue (a process flood, memory, a full disk, the network) run
from each language. Bash has the same in test_languages.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from executor import Executor, SandboxLimits, Status, default_tag
from tests.integration.conftest import NO_POOL, TEST_INSTANCE

pytestmark = pytest.mark.docker


@dataclass(frozen=True)
class Snippets:
    define: str
    """Sets a variable to 41."""
    show: str
    """Prints that variable plus one."""
    fail: str
    """Raises an error whose message is "boom"."""
    write: str
    """Writes "hello" into made.txt in the working folder."""
    env: str
    """Prints $ONLY, then the working folder, on one line with a "|" between."""
    sleep: str
    """Sleeps for a minute."""
    flood: str
    """Starts 400 processes that sleep (more than the sandbox's process limit)."""
    interfaces: str
    """Prints /proc/net/dev: the network interfaces the sandbox has."""


LANGUAGES = {
    "r": Snippets(
        define="x <- 41",
        show="cat(x + 1, '\\n')",
        fail='stop("boom")',
        write='writeLines("hello", "made.txt")',
        env='cat(paste0(Sys.getenv("ONLY"), "|", getwd()), "\\n")',
        sleep="Sys.sleep(60)",
        flood='for (i in 1:400) try(system("sleep 600", wait = FALSE), silent = TRUE)',
        interfaces="cat(readLines('/proc/net/dev'), sep = '\\n')",
    ),
    "javascript": Snippets(
        define="var x = 41;",
        show="console.log(x + 1);",
        fail='throw new Error("boom");',
        write='require("fs").writeFileSync("made.txt", "hello\\n");',
        env="console.log(`${process.env.ONLY}|${process.cwd()}`);",
        sleep="await new Promise((resolve) => setTimeout(resolve, 60000));",
        flood=(
            'const { spawn } = require("child_process");\n'
            "for (let i = 0; i < 400; i++) { try { spawn('sleep', ['600']).on('error', () => {}); }"
            " catch (e) {} }"
        ),
        interfaces="console.log(require('fs').readFileSync('/proc/net/dev', 'utf8'));",
    ),
    "typescript": Snippets(
        define="const x: number = 41;",
        show="console.log(x + 1);",
        fail='throw new Error("boom");',
        write='import * as fs from "fs";\nfs.writeFileSync("made.txt", "hello\\n");',
        env="console.log(`${process.env.ONLY}|${process.cwd()}`);",
        sleep="await new Promise((resolve) => setTimeout(resolve, 60000));",
        flood=(
            'import { spawn } from "child_process";\n'
            "for (let i = 0; i < 400; i++) { try { spawn('sleep', ['600']).on('error', () => {}); }"
            " catch (e) {} }"
        ),
        interfaces=(
            'import { readFileSync } from "fs";\n'
            "console.log(readFileSync('/proc/net/dev', 'utf8'));"
        ),
    ),
}

COUNT_SLEEPERS = """
import os
def sleepers():
    found = 0
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            found += open(f'/proc/{pid}/cmdline', 'rb').read().startswith(b'sleep')
        except OSError:
            pass
    return found
print(sleepers())
"""


@pytest.fixture(params=sorted(LANGUAGES))
def language(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.any_runtime
async def test_state_errors_files_and_scope(executor: Executor, language: str) -> None:
    code = LANGUAGES[language]
    session = executor.session(f"lang-{language}")
    await session.run("x = 'python keeps its own'")
    defined = await session.run(code.define, language=language)
    assert defined.status is Status.OK, defined.message
    shown = await session.run(code.show, language=language)
    assert shown.status is Status.OK, shown.message
    assert shown.stdout.strip() == "42"

    failed = await session.run(code.fail, language=language)
    assert failed.status is Status.ERROR
    assert failed.error is not None
    assert "boom" in failed.error.value + "".join(failed.error.traceback)
    # The kernel and its variables survive an error.
    assert (await session.run(code.show, language=language)).stdout.strip() == "42"

    written = await session.run(code.write, language=language, cwd="out")
    assert written.status is Status.OK, written.message
    assert [f.path for f in written.files] == ["out/made.txt"]
    assert await session.get_file("out/made.txt") == b"hello\n"

    scoped = await session.run(code.env, language=language, env={"ONLY": "v1"}, cwd="out")
    assert scoped.stdout.strip() == "v1|/mnt/data/out"
    after = await session.run(code.env, language=language)
    assert after.stdout.strip().endswith("|/mnt/data")
    assert not after.stdout.startswith("v1")

    python = await session.run("print(x)")
    assert python.stdout == "python keeps its own\n"


async def test_the_time_limit_and_stop_interrupt_the_run(executor: Executor, language: str) -> None:
    code = LANGUAGES[language]
    session = executor.session(f"limit-{language}")
    await session.run(code.define, language=language)
    slow = await session.run(code.sleep, language=language, timeout_s=4)
    assert slow.status is Status.TIMEOUT

    stop = asyncio.Event()
    stopping = asyncio.create_task(session.run(code.sleep, language=language, stop=stop))
    await asyncio.sleep(1)  # the run is under way (nothing to wait for: it sleeps a minute)
    stop.set()
    stopped = await stopping
    assert stopped.status is Status.KILLED
    assert stopped.message.startswith("The run was stopped on request")
    again = await session.run("print('python still here')")
    assert again.stdout == "python still here\n"


async def test_hostile_runs_from_each_language(
    executor: Executor, runtime: str, language: str
) -> None:
    code = LANGUAGES[language]
    session = executor.session(f"hostile-{language}")
    await session.run("import os", language="python")
    flood = await session.run(code.flood, language=language)
    if runtime == "runsc" and flood.status is Status.KILLED:
        # gVisor may end the whole sandbox at its process limit (as for a Python fork
        # bomb): the person is told, and the next run has a new session.
        assert flood.message.startswith("The sandbox stopped unexpectedly")
    else:
        assert flood.status in (Status.OK, Status.ERROR), flood.message
    # What the run started is ended once it is over, and the sandbox still works.
    assert (await session.run(COUNT_SLEEPERS)).stdout == "0\n"
    net = await session.run(code.interfaces, language=language)
    assert net.status is Status.OK, net.message
    # No interface but loopback: nothing to reach any address with (checked on what the
    # sandbox has, without connecting anywhere).
    names = [line.split(":")[0].strip() for line in net.stdout.splitlines()[2:] if ":" in line]
    assert names == ["lo"]


@pytest.mark.any_runtime
async def test_r_plots_come_back_as_pictures(executor: Executor) -> None:
    session = executor.session("r-plots")
    base = await session.run("plot(1:10, main = 'base')", language="r")
    assert base.status is Status.OK, base.message
    assert [r.image_types for r in base.results if r.image_types] == [["image/png"]]
    gg = await session.run(
        "library(ggplot2)\n"
        "print(ggplot(data.frame(x = 1:5, y = c(3, 1, 4, 1, 5)), aes(x, y)) + geom_line())",
        language="r",
    )
    assert gg.status is Status.OK, gg.message
    pictures = [r for r in gg.results if "image/png" in r.data]
    assert len(pictures) == 1
    png = pictures[0].image_bytes("image/png")
    assert png is not None
    assert png.startswith(b"\x89PNG")


@pytest.mark.parametrize("language", ["r", "javascript"])
async def test_a_kernel_that_runs_out_of_memory_takes_only_its_own_state(
    runtime: str, language: str
) -> None:
    hog = {
        "r": "x <- list(); for (i in 1:100) x[[i]] <- runif(2e7)",
        "javascript": "const a = []; while (true) a.push(new Float64Array(1e7).fill(1));",
    }[language]
    limits = SandboxLimits(runtime=runtime, memory_mb=512, timeout_s=60)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        session = ex.session(f"oom-{language}")
        await session.run("kept = 'python state'")
        result = await session.run(hog, language=language)
        assert result.status in (Status.MEMORY, Status.KILLED, Status.ERROR), result.message
        assert not result.session_restarted
        python = await session.run("print(kept)")
        if runtime == "runsc":
            # To the host's memory limit a gVisor sandbox is one process: the whole
            # sandbox goes, as it does when Python runs out, and the next run says so.
            assert python.session_restarted
        else:
            assert python.stdout == "python state\n"
            assert not python.session_restarted
        # A new kernel starts in seconds, but on a loaded machine, once the memory of the one
        # that was killed is given back, it may take far longer: its run gets the time.
        fresh = await session.run(LANGUAGES[language].define, language=language, timeout_s=180)
        assert fresh.status is Status.OK, fresh.message


FILL = {
    "r": 'con <- file("big.bin", "wb"); for (i in 1:400) writeBin(raw(1e6), con); close(con)',
    "javascript": (
        'const fs = require("fs"); const chunk = Buffer.alloc(1e6);\n'
        'for (let i = 0; i < 400; i++) fs.appendFileSync("big.bin", chunk);'
    ),
    "bash": "for i in $(seq 1 400); do head -c 1000000 /dev/zero >> big.bin || break; done",
}
FULL = {
    "r": "problem writing to connection",
    "javascript": "ENOSPC",
    "bash": "No space left on device",
}
"""How each language says the disk is full (R warns; the others fail)."""


@pytest.mark.parametrize("language", sorted(FILL))
async def test_filling_the_disk_from_each_language_stops_at_its_limit(
    runtime: str, language: str
) -> None:
    limits = SandboxLimits(runtime=runtime, data_mb=64, file_size_mb=256, timeout_s=60)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        session = ex.session(f"disk-{language}")
        await session.run("kept = 'python state'")
        filled = await session.run(FILL[language], language=language)
        said = filled.stdout + filled.stderr + (filled.error.value if filled.error else "")
        assert FULL[language] in said, said[-500:]
        # The file stopped at the disk's size, and the session goes on.
        after = await session.run(
            "import os\nprint(kept, os.path.getsize('big.bin') <= 64 * 2**20)"
        )
        assert after.stdout == "python state True\n"
