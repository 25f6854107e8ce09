"""Nothing runs between runs, under runc and runsc: what a run leaves in the kernel (a busy
thread, a thread or timer that starts processes once the run has ended) rests until the
next run, where it carries on and is counted; the sandbox's CPU time, as the engine counts
it, stays near zero while the host asks nothing of it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import docker
import pytest

from executor import Executor, SandboxLimits, Status, default_tag
from tests.integration.conftest import NO_POOL, TEST_INSTANCE
from tests.integration.sandbox_probes import idle_cpu_seconds, only_sandbox
from tests.integration.test_sandbox_isolation import LEFTOVERS

pytestmark = pytest.mark.docker

IDLE_WINDOW_S = 3.0
# One busy process or thread alone uses about one CPU second per second; gVisor's own
# kernel uses a few hundredths of one while the sandbox is idle.
IDLE_CPU_LIMIT_S = 0.5

LEFT_BEHIND = {
    "busy thread": """
import threading
ticks = [0]
def spin():
    while True:
        ticks[0] += 1
threading.Thread(target=spin, daemon=True).start()
""",
    "thread that starts a busy process after the run": """
import subprocess, sys, threading, time
started = []
def later():
    time.sleep(0.5)
    started.append(subprocess.Popen([sys.executable, '-c', 'while True: pass']))
threading.Thread(target=later, daemon=True).start()
""",
    "thread that starts a daemon after the run": """
import subprocess, sys, threading, time
DAEMON = (
    'import os\\n'
    'if os.fork(): os._exit(0)\\n'
    'os.setsid()\\n'
    'if os.fork(): os._exit(0)\\n'
    'while True: pass'
)
started = []
def later():
    time.sleep(0.5)
    started.append(subprocess.Popen([sys.executable, '-c', DAEMON], start_new_session=True))
threading.Thread(target=later, daemon=True).start()
""",
    "chain of processes that fork and exit, faster than a scan": """
import subprocess, sys
CHAIN = (
    'import os\\n'
    'while True:\\n'
    '    try:\\n'
    '        if os.fork(): os._exit(0)\\n'
    '    except OSError:\\n'
    '        pass\\n'
)
started = [subprocess.Popen([sys.executable, '-c', CHAIN])]
""",
    "busy thread beside a forked copy of the kernel": """
import os, threading
ticks = [0]
def spin():
    while True:
        ticks[0] += 1
threading.Thread(target=spin, daemon=True).start()
child = os.fork()
if child == 0:
    while True:
        pass
started = [child]
""",
    "timer that busy-loops after the run": """
import threading, time
ticks = [0]
def spin():
    while True:
        ticks[0] += 1
threading.Timer(0.5, spin).start()
""",
}

# Children, a daemon in a session of its own, multiprocessing and renamed forks: killing
# them orphans the kernel's process group while the kernel is stopped, for which the system
# sends the group SIGHUP and SIGCONT; the kernel must neither die nor run on.
LEFT_BEHIND["every kind of leftover process beside a busy thread"] = (
    LEFTOVERS + LEFT_BEHIND["busy thread"]
)

# A thread that starts a busy process again whenever the one before has ended.
RESTARTER = """
import subprocess, sys, threading, time
started = []
def again():
    while True:
        if not started or started[-1].poll() is not None:
            started.append(subprocess.Popen([sys.executable, '-c', 'while True: pass']))
        time.sleep(0.2)
threading.Thread(target=again, daemon=True).start()
"""

# Every process but the runner and the kernel, as a run sees them.
OTHERS = r"""
import json, os
me = os.getpid()
others = []
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) in (1, me):
        continue
    try:
        state = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]
        cmdline = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode()
    except OSError:
        continue
    if state not in ('Z', 'X'):
        others.append(cmdline)
print(json.dumps(others))
"""


@pytest.mark.parametrize("left", list(LEFT_BEHIND))
async def test_what_a_run_leaves_in_the_kernel_rests_until_the_next_run(
    executor: Executor, docker_client: docker.DockerClient, left: str
) -> None:
    session = executor.session("between")
    first = await session.run(LEFT_BEHIND[left] + "\nkept = 'state'")
    assert first.status is Status.OK, first.message

    sandbox = only_sandbox(docker_client)
    idle = await idle_cpu_seconds(docker_client, sandbox, IDLE_WINDOW_S)
    assert idle < IDLE_CPU_LIMIT_S, f"{idle:.2f} s of CPU between runs ({left})"

    # The next run works, and what was left carries on in it (counted as the run's).
    second = await session.run(
        "import time\n"
        "progress = globals().get('ticks', [0])[0]\n"
        "time.sleep(1)\n"
        "moved = globals().get('ticks', [1])[0] > progress\n"
        "print(kept, moved, len(globals().get('started', [1])))"
    )
    assert second.status is Status.OK, second.message
    assert second.stdout == "state True 1\n"
    # What it started in that run ended with it; the kernel's threads are still there.
    third = await session.run(OTHERS)
    assert json.loads(third.stdout) == [], third.stdout
    idle = await idle_cpu_seconds(docker_client, sandbox, IDLE_WINDOW_S)
    assert idle < IDLE_CPU_LIMIT_S, f"{idle:.2f} s of CPU after the second run ({left})"


async def test_the_kernel_rests_after_a_time_limit_too(
    executor: Executor, docker_client: docker.DockerClient
) -> None:
    """A run that the host ends at its time limit (an interrupt) leaves the kernel resting
    as well."""
    session = executor.session("woken")
    await session.run(RESTARTER)
    stopped = await session.run("import time\ntime.sleep(30)", timeout_s=2)
    assert stopped.status is Status.TIMEOUT, stopped.message
    sandbox = only_sandbox(docker_client)
    idle = await idle_cpu_seconds(docker_client, sandbox, IDLE_WINDOW_S)
    assert idle < IDLE_CPU_LIMIT_S, f"{idle:.2f} s of CPU after a time limit"
    # The kernel kept its state, and the thread carries on in the next run.
    after = await session.run("time.sleep(0.5)\nprint(len(started) > 1)")
    assert after.stdout == "True\n", after.message


async def test_background_work_carries_on_where_it_is_allowed(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    """CELLMATE_SANDBOX_BACKGROUND_PROCESSES=true: what a run starts keeps running, by
    design, and its CPU time is not counted to any run."""
    limits = SandboxLimits(runtime=runtime, background_processes=True)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        session = ex.session("background")
        await session.run(LEFT_BEHIND["busy thread"])
        sandbox = only_sandbox(docker_client)
        idle = await idle_cpu_seconds(docker_client, sandbox, IDLE_WINDOW_S)
        assert idle > IDLE_CPU_LIMIT_S, f"{idle:.2f} s of CPU between runs"


RUNNER_WAKEUPS_PER_S = 10
"""Resting, the runner wakes about once a second (it reaps orphans, as init). A heartbeat
to a stopped kernel (a new socket each second), or looking for a warm-up mark 50 times a
second while the kernel that would write it is stopped, is several times this."""


def wakeups(pid: int) -> int:
    """The times the process's threads went to sleep and were woken since they started."""
    count = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    count += int(line.split()[1])
    return count


# Under runc the runner is a process of the host's, whose threads the host can count; under
# gVisor they are its own kernel's.
@pytest.mark.warm_up
@pytest.mark.parametrize("runtime", ["runc"])
async def test_the_runner_sleeps_while_the_kernel_rests_even_before_its_warm_up_ended(
    executor: Executor, docker_client: docker.DockerClient
) -> None:
    session = executor.session("early")
    # At once, with no import to wait for: the kernel rests with its warm-up halfway.
    first = await session.run("x = 41")
    assert first.status is Status.OK, first.message
    runner = int(
        docker_client.api.inspect_container(only_sandbox(docker_client).id)["State"]["Pid"]
    )
    before, started = wakeups(runner), time.monotonic()
    await asyncio.sleep(IDLE_WINDOW_S)  # the measurement's window, not a wait for a condition
    rate = (wakeups(runner) - before) / (time.monotonic() - started)
    assert rate < RUNNER_WAKEUPS_PER_S, f"the resting runner woke {rate:.0f} times a second"
    # The warm-up goes on when the kernel does: a cell that imports waits for it, and works.
    second = await session.run("import pandas as pd\nprint(x + 1, pd.__name__)")
    assert second.stdout == "42 pandas\n", second.message
