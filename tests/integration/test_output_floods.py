"""A run that floods every output channel it has (sys.stdout and sys.stderr, descriptors 1
and 2, a child process's, during the run and from a thread between runs) sends the host
only what the run's output caps let through, under runc and runsc: the kernel's stderr
is not a channel to the host, nor is anything between runs; the host's memory stays flat
and the next run works."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from executor import Executor, Status
from tests.integration.sandbox_probes import StreamCounter, idle_cpu_seconds, only_sandbox
from tests.support.channel_breaker import breaks_the_runners_messages

pytestmark = pytest.mark.docker

FLOOD_S = 1.5
# Text output is capped at 1 MB per run; what crosses to the host is that, in events.
HOST_BYTES_LIMIT = 8 * 1024 * 1024
HOST_MEMORY_GROWTH_LIMIT = 50 * 1024 * 1024

IN_A_RUN = f"""
import os, subprocess, sys, time
chunk = 'x' * 65536
end = time.monotonic() + {FLOOD_S}
while time.monotonic() < end:
    sys.stdout.write(chunk)
    sys.stderr.write(chunk)
    os.write(1, chunk.encode())
    os.write(2, chunk.encode())
CHILD = (
    'import os, time\\n'
    'end = time.monotonic() + {FLOOD_S}\\n'
    'while time.monotonic() < end: os.write(FD, b"y" * 65536)'
)
subprocess.run([sys.executable, '-c', CHILD.replace('FD', '2')])
subprocess.run([sys.executable, '-c', CHILD.replace('FD', '2')], stderr=sys.stderr)
subprocess.run([sys.executable, '-c', CHILD.replace('FD', '1')], stdout=sys.stdout)
'flooded'
"""

BETWEEN_RUNS = """
import os, subprocess, sys, threading
flooding = [True]
def flood():
    chunk = 'z' * 65536
    while flooding[0]:
        os.write(2, chunk.encode())
        sys.stderr.write(chunk)
        sys.__stderr__.write(chunk)
threading.Thread(target=flood, daemon=True).start()
"""


def resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


async def test_floods_reach_the_host_only_within_the_output_caps(
    executor: Executor, docker_client: docker.DockerClient
) -> None:
    session = executor.session("flood")
    assert (await session.run("kept = 'state'")).status is Status.OK
    counter = StreamCounter(docker_client, only_sandbox(docker_client))
    memory = resident_bytes()
    try:
        during = await session.run(IN_A_RUN)
        assert during.status is Status.OK, during.message
        assert during.results[-1].text == "'flooded'"
        assert during.output_truncated

        between = await session.run(BETWEEN_RUNS)
        assert between.status is Status.OK, between.message
        await idle_cpu_seconds(docker_client, only_sandbox(docker_client), 3.0)

        after = await session.run("flooding[0] = False\nkept")
        assert after.status is Status.OK, after.message
        assert after.results[-1].text == "'state'"
    finally:
        counter.close()
    assert counter.bytes < HOST_BYTES_LIMIT, f"{counter.bytes:,} bytes reached the host"
    growth = resident_bytes() - memory
    assert growth < HOST_MEMORY_GROWTH_LIMIT, f"the host grew by {growth:,} bytes"


async def test_code_that_breaks_the_runners_messages_is_stopped_and_the_user_told(
    executor: Executor,
) -> None:
    await breaks_the_runners_messages(executor.session("breaker"))
