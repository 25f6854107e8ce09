"""A sandbox that floods every channel it reaches (its error stream, the runner's descriptors,
garbage lines on the protocol stream), during a run and between runs, costs the bot a fixed
amount of memory and the node a fixed amount of container log; the session's next run works
or says why not. The termination message's file on the node is out of the sandbox's reach."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from bot.sandbox_words import spoken
from executor import Status
from tests.kubernetes.conftest import NAMESPACE, make_executor, sandbox_pods
from tests.support.channel_breaker import breaks_the_runners_messages

pytestmark = pytest.mark.kubernetes

MIB = 1024 * 1024
LOG_BOUND = 128 * MIB
"""The junk the bot reads before it cuts a sandbox off, in the container log's format (a
timestamp and stream name on each line: several times the flood's short lines), what the
runtime, the kubelet and the API server buffer on the way, and what reaches the log while
the Pod is deleted: 38-92 MiB measured. Without the cut-off the same flood wrote 594 MB
before the kubelet's first rotation."""
FLOODER = """
import os, threading, time

def targets():
    found = [2]  # the kernel's own error stream
    for fd in range(0, 64):  # the runner's descriptors, where the runtime lets code reach them
        try:
            found.append(os.open(f"/proc/1/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    return found

def flood(fd, seconds):
    garbage = (b"0" * 64 + b" 1 " + b"{" * 200 + b"\\n" + b"garbage line\\n" * 50) * 40
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            os.write(fd, garbage)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            return

reached = targets()
threads = [threading.Thread(target=flood, args=(fd, SECONDS), daemon=True) for fd in reached]
for thread in threads:
    thread.start()
if WAIT:
    for thread in threads:
        thread.join()
print("flooding", len(reached))
"""


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def container_log_bytes(pod: str) -> int:
    """The container log the kubelet keeps for `pod` on this (the only) node."""
    logs = Path("/var/log/pods").glob(f"{NAMESPACE}_{pod}_*/*/*")
    return sum(path.stat().st_size for path in logs if path.is_file())


async def watch(pod: str, seconds: float) -> tuple[int, int]:
    """The highest RSS and container log size seen over `seconds`."""
    top_rss, top_log = rss(), container_log_bytes(pod)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        top_rss, top_log = max(top_rss, rss()), max(top_log, container_log_bytes(pod))
    return top_rss, top_log


@pytest.mark.parametrize("when", ["during", "between"])
async def test_a_flood_on_every_channel_costs_a_fixed_amount_and_the_session_says_so(
    admin: k8s.ApiClient, bot_kubeconfig: str, runtime: str, when: str
) -> None:
    async with make_executor(bot_kubeconfig, runtime, timeout_s=30) as executor:
        session = executor.session(f"flood-{when}")
        first = await session.run("kept = 1")
        assert first.status is Status.OK, first.message
        (pod,) = sandbox_pods(admin)
        before = rss()
        code = FLOODER.replace("SECONDS", "60").replace("WAIT", "False")
        if when == "during":
            code = FLOODER.replace("SECONDS", "15").replace("WAIT", "True")
        flooding = asyncio.ensure_future(session.run(code))
        top_rss, top_log = await watch(pod, 20)
        result = await flooding
        top_rss = max(top_rss, rss())
        assert top_rss - before < 50 * MIB, f"the bot grew by {(top_rss - before) // MIB} MiB"
        assert top_log < LOG_BOUND, f"container log {top_log // MIB} MiB"
        after = spoken(await session.run("1 + 1"))
        if after.status is Status.TIMEOUT:
            # The flooding thread woke with the run and kept its output going past the time
            # limit: said so, and the session after it works.
            assert "time limit" in after.message, after.message
            after = spoken(await session.run("1 + 1"))
        if after.status is Status.KILLED and "output may be missing" in after.message:
            # The flood cut one of the runner's messages on the way (gVisor lets code write
            # into the runner's stdout): said so, and that sandbox was stopped.
            after = spoken(await session.run("1 + 1"))
            assert "broke the runner's messages" in after.message, after.message
        if after.session_restarted:
            # Cut off for its junk, out of memory, or gone: the new session says which.
            assert after.message.startswith("This is a new session ("), after.message
        else:
            assert "kept" not in after.message
        assert after.status is Status.OK, after.message
        assert after.results[-1].text == "2"
        if when == "during" and result.status is not Status.OK:
            assert "stopped" in result.message, result.message


async def test_the_termination_message_file_is_out_of_reach(
    bot_kubeconfig: str, runtime: str
) -> None:
    probe = (
        "import os\n"
        "for path in ('/dev/termination-log', '/root/termination-log', '/root/x'):\n"
        "    try:\n"
        "        with open(path, 'ab') as f:\n"
        "            f.write(b'x' * 1000000)\n"
        "        print(path, 'written')\n"
        "    except OSError as exc:\n"
        "        print(path, type(exc).__name__)\n"
    )
    async with make_executor(bot_kubeconfig, runtime) as executor:
        result = await executor.session("termination").run(probe)
    assert result.status is Status.OK, result.message
    lines = result.stdout.splitlines()
    assert "/root/termination-log PermissionError" in lines, lines
    assert "/root/x PermissionError" in lines, lines
    assert "/dev/termination-log written" not in lines, lines


async def test_code_that_breaks_the_runners_messages_is_stopped_and_the_user_told(
    bot_kubeconfig: str, runtime: str
) -> None:
    async with make_executor(bot_kubeconfig, runtime) as executor:
        await breaks_the_runners_messages(executor.session("breaker"))
