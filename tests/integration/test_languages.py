"""Runs in R, JavaScript, TypeScript and Bash (`Session.run(code, language=...)`) with the real
kernels under runc and runsc: each keeps its own state across runs, errors come back as
data with their traceback, files written to /mnt/data come back, and the Python kernel's
variables are untouched by them."""

from __future__ import annotations

import pytest

from executor import Executor, Status

pytestmark = pytest.mark.docker

SLEEPING = """
import os
def sleeping():
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            if open(f'/proc/{pid}/cmdline', 'rb').read().startswith(b'sleep'):
                return True
        except OSError:
            pass
    return False
print(sleeping())
"""


@pytest.mark.any_runtime
async def test_bash_keeps_its_state_and_shares_mnt_data(executor: Executor) -> None:
    session = executor.session("bash")
    await session.run("x = 41")
    first = await session.run("export GREETING=hi; N=41; cd /mnt/data", language="bash")
    assert first.status is Status.OK, first.message
    second = await session.run(
        "echo $GREETING $((N + 1)); echo from-bash > made.txt", language="sh"
    )
    assert second.status is Status.OK, second.message
    assert second.stdout == "hi 42\n"
    assert [f.path for f in second.files] == ["made.txt"]
    python = await session.run("print(x + 1, open('made.txt').read().strip())")
    assert python.stdout == "42 from-bash\n"


@pytest.mark.any_runtime
async def test_bash_errors_come_back_as_errors(executor: Executor) -> None:
    session = executor.session("bash-error")
    failed = await session.run("echo before; no-such-command-here", language="bash")
    assert failed.status is Status.ERROR
    assert "before" in failed.stdout
    assert "no-such-command-here" in failed.stdout + failed.stderr + (
        failed.error.value if failed.error else ""
    )


@pytest.mark.any_runtime
async def test_bash_env_and_folder_hold_for_one_run(executor: Executor) -> None:
    session = executor.session("bash-scope")
    await session.run("export KEEP=mine", language="bash")
    scoped = await session.run(
        'echo "$KEEP|$ONLY|$(pwd)"',
        language="bash",
        env={"KEEP": "run's $x", "ONLY": "1"},
        cwd="out",
    )
    assert scoped.stdout == "run's $x|1|/mnt/data/out\n"
    after = await session.run('echo "$KEEP|${ONLY-unset}|$(pwd)"', language="bash")
    assert after.stdout == "mine|unset|/mnt/data\n"


async def test_a_bash_run_that_outlives_its_limit_is_interrupted(executor: Executor) -> None:
    session = executor.session("bash-limit")
    slow = await session.run("sleep 60", language="bash", timeout_s=3)
    assert slow.status is Status.TIMEOUT
    again = await session.run("echo still-here", language="bash")
    assert again.stdout == "still-here\n"


async def test_what_a_bash_run_leaves_running_is_ended(executor: Executor) -> None:
    session = executor.session("bash-leftover")
    await session.run("sleep 1000 &", language="bash")
    seen = await session.run(SLEEPING)
    assert seen.stdout == "False\n"


async def test_a_bash_process_flood_is_ended_and_there_is_no_network(
    executor: Executor, runtime: str
) -> None:
    session = executor.session("bash-flood")
    flood = await session.run(
        "for i in $(seq 1 400); do sleep 600 & done 2>/dev/null; echo started", language="bash"
    )
    if runtime == "runsc" and flood.status is Status.KILLED:
        assert flood.message.startswith("The sandbox stopped unexpectedly")
    assert (await session.run(SLEEPING)).stdout == "False\n"
    net = await session.run("cat /proc/net/dev", language="bash")
    names = [line.split(":")[0].strip() for line in net.stdout.splitlines()[2:] if ":" in line]
    assert names == ["lo"]
