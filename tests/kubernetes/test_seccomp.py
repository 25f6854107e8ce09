"""Runc sandboxes run under the Localhost seccomp profile: the calls a notebook never needs
(io_uring, userfaultfd, perf_event_open, bpf) fail, ordinary work runs; gVisor sandboxes keep
the runtime's default and start as before. A node without the profile is named at start."""

from __future__ import annotations

import dataclasses

import pytest

from executor import SandboxLimits, Status, default_tag
from executor.errors import SandboxError
from executor.kubernetes_backend import KubernetesBackend
from tests.kubernetes.conftest import TEST_INSTANCE, make_executor, settings

pytestmark = pytest.mark.kubernetes

PROBE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
         "userfaultfd": 323, "perf_event_open": 298, "bpf": 321}
params = ctypes.create_string_buffer(120)
for name, number in calls.items():
    result = libc.syscall(number, 1, ctypes.byref(params), 0, 0, 0, 0)
    print(name, "refused" if result == -1 and ctypes.get_errno() in (errno.EPERM, errno.ENOSYS)
          else f"answered {result} {ctypes.get_errno()}")
import numpy, threading, subprocess
print("work", int(numpy.arange(10).sum()), subprocess.run(["true"]).returncode)
"""


async def test_calls_a_notebook_never_needs_are_refused_under_runc_and_work_runs(
    bot_kubeconfig: str,
) -> None:
    async with make_executor(bot_kubeconfig, "runc") as executor:
        result = await executor.session("seccomp").run(PROBE)
    assert result.status is Status.OK, result.message
    lines = result.stdout.splitlines()
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert f"{name} refused" in lines, lines
    for name in ("userfaultfd", "perf_event_open", "bpf"):
        assert f"{name} refused" in lines, lines
    assert "work 45 0" in lines


async def test_gvisor_sandboxes_keep_the_runtimes_default_and_run(bot_kubeconfig: str) -> None:
    # gVisor answers these calls in its own kernel (its io_uring included), not the host's.
    async with make_executor(bot_kubeconfig, "runsc") as executor:
        result = await executor.session("seccomp").run(PROBE)
    assert result.status is Status.OK, result.message
    assert "work 45 0" in result.stdout.splitlines()


async def test_a_node_without_the_profile_is_named_at_start(bot_kubeconfig: str) -> None:
    chosen = dataclasses.replace(settings(bot_kubeconfig), seccomp_profile="cellmate/missing.json")
    backend = KubernetesBackend(default_tag(), chosen, instance=TEST_INSTANCE)
    try:
        with pytest.raises(SandboxError) as refused:
            await backend.start(SandboxLimits(runtime="runc"), None)
    finally:
        await backend.close()
    message = str(refused.value)
    assert "seccomp profile 'cellmate/missing.json' is not installed on k8snode" in message
    assert "scripts/install-seccomp-profile.sh" in message
