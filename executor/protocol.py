"""The seam between running code and where sandboxes come from.

`notebook.py` (and later the session manager) only speak these protocols; Docker is one
backend (`docker_backend.py`). A Kubernetes or Azure Container Apps backend implements the
same two classes and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from executor.archive import ExtractedFiles, OutputCaps
from executor.limits import SandboxLimits


@dataclass(frozen=True, slots=True)
class ExitState:
    running: bool
    exit_code: int | None
    oom_killed: bool


class Sandbox(Protocol):
    """One started sandbox whose runner speaks JSON lines (see cellmate_runner.py)."""

    @property
    def id(self) -> str: ...

    @property
    def alive(self) -> bool:
        """False once the runner's output has ended (the sandbox is gone)."""

    @property
    def address(self) -> str | None:
        """The sandbox's address on the sandbox network, which is how the egress proxy knows
        it (None: it has no network)."""

    async def put_files(self, tar: bytes) -> None:
        """Extract a tar of plain files into /mnt/data."""

    async def send(self, request: Mapping[str, Any]) -> None:
        """Write one request to the runner."""

    async def receive(self) -> dict[str, Any] | None:
        """The runner's next event, or None once its output has ended."""

    async def get_files(
        self,
        caps: OutputCaps,
        unchanged: Mapping[str, bytes] | None = None,
        wanted: Collection[str] | None = None,
    ) -> ExtractedFiles:
        """Regular files under /mnt/data (only the `wanted` paths, when given), read within
        caps from one consistent view of the folder: no path is resolved on its own, and a
        link never leads out of it."""

    async def exit_state(self) -> ExitState: ...

    async def kill(self) -> None:
        """Stop everything in the sandbox at once; its files stay readable until destroy."""

    async def destroy(self) -> None:
        """Remove the sandbox and its storage; safe to call more than once."""


class SandboxBackend(Protocol):
    async def check(self, runtime: str = "runc") -> None:
        """Raise EngineUnavailable or ImageNotFound when sandboxes cannot be started."""

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> Sandbox:
        """Create a sandbox, put the input files into /mnt/data, and start its runner."""

    async def remove_leftovers(self, keep: Collection[str] = ()) -> int:
        """Remove sandboxes that an earlier process left behind, but those whose id is in
        `keep`; return how many."""

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Recovered:
    """A session's sandbox that an earlier process of this instance left running."""

    sandbox: Sandbox
    session: str
    """The key of the session it holds."""
    kept: str = ""
    """A run that went on in the background there (still going, or ended since), for a
    `Follow`; its events were kept while nobody listened."""


@runtime_checkable
class SessionKeeper(Protocol):
    """A backend whose sandboxes can outlive the process: on exit the executor leaves its
    sessions' sandboxes running (detached), and the next process of the same instance finds
    them again, so a restart of the bot keeps every conversation's variables and files."""

    @property
    def keeps_sessions(self) -> bool:
        """Whether a later process could attach to them again (it can make their keys)."""

    async def recover(self, skip: Collection[str] = ()) -> list[Recovered]:
        """Attach again to this instance's sandboxes that hold a session and answer as their
        runner, but those in `skip` (another replica holds them: they are not touched); the
        rest are left for remove_leftovers."""

    async def adopt(self, sandbox_id: str) -> Recovered | None:
        """Attach to one sandbox by its id, whatever its instance (another replica started
        it, and may still be attached), and ask its runner under its key which session it
        holds, as `recover` does; None when it is gone or does not answer (it is let go)."""

    async def detach(self, sandbox: Sandbox) -> None:
        """Let go of a sandbox without stopping it."""


@dataclass(frozen=True, slots=True)
class PausedSandbox:
    """A session's sandbox paused to a memory snapshot: where it is, and the runner key the
    snapshot holds. Kept inside the session's workspace, which the store seals for its
    conversation, so only that conversation's next run can resume it."""

    backend: str
    sandbox: str
    """The backend's id of the stopped sandbox that holds the snapshot."""
    checkpoint: str
    key: str
    """The runner key (hex) when the snapshot was taken; replaced at once on resume."""
    paused_at: float
    """Epoch seconds."""


@runtime_checkable
class SnapshotKeeper(Protocol):
    """A backend that can checkpoint a whole sandbox (kernel memory, open files, threads,
    the runner) and restore it later, in this process or a later one."""

    async def pause_refusal(self, limits: SandboxLimits) -> str | None:
        """Why sandboxes with `limits` cannot be paused here (None: they can)."""

    async def pause(self, sandbox: Sandbox, max_mb: int) -> PausedSandbox:
        """Checkpoint the sandbox and stop it: it holds no memory until resumed. Raises
        SnapshotFailed (the sandbox is left as it was) when it cannot, or when its memory
        is larger than `max_mb`."""

    async def resume(self, paused: PausedSandbox, session: str) -> Sandbox:
        """The paused sandbox restored and running again, its runner proven to hold the
        snapshot's key and to hold `session`, and given a fresh key. Raises SnapshotFailed,
        with what went wrong, after removing what is left of it: nothing half-restored runs."""

    async def remove_paused(self, paused: PausedSandbox) -> None:
        """Remove a paused sandbox that will not be resumed."""
