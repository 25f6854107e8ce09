"""Whether sandbox Pods are kept apart on the Pod network, tried rather than guessed: a
sandbox listens, and another (an allowlist sandbox, in allowlist mode, whose only door is
the egress proxy) tries to connect to it by Pod address. The NetworkPolicies of
deploy/kubernetes must block that; only a plugin that enforces them does, so the attempt,
not the list of installed API groups, says whether they hold here."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bot.ops.findings import Finding
from executor import wire
from executor.errors import ExecutorError
from executor.kubernetes_backend import KubernetesBackend
from executor.limits import SandboxLimits
from executor.protocol import Sandbox
from executor.runner_client import RunnerClient

PROBE_PORT = 7007
PROBE_TIMEOUT_S = 90.0
# A listening socket accepts connections in the system's network stack even while the
# runner holds the kernel stopped between runs: reaching it needs no more than this.
LISTEN = (
    "import socket\n"
    "_cellmate_probe = socket.socket()\n"
    "_cellmate_probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"_cellmate_probe.bind(('0.0.0.0', {PROBE_PORT}))\n"
    "_cellmate_probe.listen(8)\n"
    "print('listening')"
)
TRY = (
    "import socket\n"
    "try:\n"
    f"    socket.create_connection((ADDRESS, {PROBE_PORT}), timeout=5).close()\n"
    "    print('reached')\n"
    "except OSError as exc:\n"
    "    print('blocked', type(exc).__name__)"
)


async def said(sandbox: Sandbox, cells: Sequence[str]) -> str:
    """What one run prints (its stdout), in a sandbox that is ready."""
    client = RunnerClient(sandbox)
    run_id = await client.run(cells, output_limit=10_000, rich_limit=0, rich_count_limit=0)
    text = []
    async for event in client.run_events(run_id):
        if isinstance(event, wire.Output) and event.output.get("name") == "stdout":
            text.append(str(event.output.get("text", "")))
    return "".join(text)


async def isolation(
    backend: KubernetesBackend, limits: SandboxLimits, listener: Sandbox
) -> Finding:
    """Try `listener` (a started, ready sandbox) from a second sandbox of `limits`."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            if "listening" not in await said(listener, [LISTEN]) or not listener.address:
                return _unchecked("the listening sandbox has no address or could not listen")
            prober = await backend.start(limits, None)
            try:
                await RunnerClient(prober).ready()
                answer = await said(prober, [TRY.replace("ADDRESS", repr(listener.address))])
            finally:
                await prober.destroy()
    except (ExecutorError, TimeoutError) as exc:
        return _unchecked(str(exc) or "it took too long")
    who = "an allowlist sandbox" if limits.egress == "allowlist" else "a sandbox"
    if answer.startswith("blocked"):
        return Finding(
            "isolation",
            True,
            f"{who} could not reach another sandbox's listener by Pod address "
            f"({answer.split()[-1]}): sandboxes are kept apart",
        )
    if answer.startswith("reached"):
        return Finding(
            "isolation",
            False,
            f"{who.upper()} REACHED ANOTHER SANDBOX'S LISTENER BY POD ADDRESS: the "
            "NetworkPolicies of deploy/kubernetes are not enforced here, so sandboxes reach "
            "each other (other people's sessions) and whatever else is on the Pod network",
            "install a network plugin that enforces NetworkPolicy (Calico, Cilium, ...), or "
            "use CELLMATE_SANDBOX_RUNTIME=runsc with a RuntimeClass that has no network",
            required=False,
        )
    return _unchecked(f"the probe said {answer.strip()[:100]!r}")


def _unchecked(why: str) -> Finding:
    return Finding("isolation", False, f"could not be tried: {why}", required=False)
