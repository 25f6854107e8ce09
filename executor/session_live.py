"""What the parts of session mode share: one live session's record, what a run may restore
into it, the view of the session manager that the workspace and file parts use (their requests to
the runner go through RunnerClient)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from executor.errors import InvalidInput
from executor.limits import SandboxLimits
from executor.pool import Lease, QueueCallback
from executor.run import OutputCallback
from executor.run_input import InputCallback, RunClock
from executor.session_news import Ended, Held, WorkspaceNews
from executor.workspace import Workspace


class Restore(enum.Enum):
    """What a run (or /restore) may bring back of a saved workspace into a new session.

    Loading pickled variables runs code (unpickling calls what `__reduce__` names), so it
    is for the caller to allow, by the same rule as a run: files alone run nothing."""

    VARIABLES = "variables"
    """Files, then the variables."""
    FILES = "files"
    """Files only: a run then goes on without the variables, which are not loaded later."""


@dataclass(frozen=True, slots=True)
class RunHooks:
    """What a run tells its caller as it goes, and asks of it."""

    on_output: OutputCallback | None = None
    on_queued: QueueCallback | None = None
    on_input: InputCallback | None = None
    clock: RunClock | None = None
    """The run's clock, which its caller may raise (a run sent to the background)."""


@dataclass(eq=False, slots=True)
class Live:
    lease: Lease
    created: float
    last_used: float
    saved: Workspace | None = None
    """The saved workspace the session started with, while its variables are not loaded."""
    files_back: bool = False
    restored: Held | None = None
    """Why nothing more may be restored into this session (None while something may)."""
    ran: bool = False
    """Code ran in it (its variables are its own, not the saved ones)."""
    packages: WorkspaceNews | None = None
    """What became of the saved workspace's packages (only its package fields are set)."""
    paused: bool = False
    """Its sandbox was paused to a memory snapshot: let go of, not removed."""
    secret_given: bool = False
    """Code in it was given an answer to `getpass()`: it is never paused to a memory
    snapshot (its workspace, which leaves such variables out, is saved instead)."""
    languages: set[str] = field(default_factory=set)
    """The languages besides Python its code ran in: their variables are not saved."""
    acks: bool = False
    """Its runner is known to acknowledge runs (`Started`): it was started here, from this
    version's image, or it acknowledged one already. Only then does an output that ended
    before the acknowledgement mean that none of the run's code ran (an adopted sandbox may
    hold an earlier version's runner, which never sends one)."""


Found = tuple[Live, Ended | None]
"""A key's session, and why its previous one ended when it is new."""


class LiveSessions(Protocol):
    """The session manager, as the workspace and file parts of a session see it."""

    def lock(self, key: str) -> asyncio.Lock:
        """Held while anything runs in or changes the key's session."""

    def live(self, key: str) -> Live | None:
        """The key's session, None when it has none."""

    async def open(self, key: str) -> Live:
        """The key's session, started when it has none (its lock held)."""


def run_limits(base: SandboxLimits, overrides: Mapping[str, Any]) -> SandboxLimits:
    """The limits of one session run: only per-run ones may differ from the session's."""
    limits = dataclasses.replace(base, **overrides) if overrides else base
    if limits.container_spec() != base.container_spec():
        raise InvalidInput(
            "a session run can change only per-run limits (time, output); container limits "
            "(memory, CPU, runtime, network, sizes) are set for the executor"
        )
    return limits


async def unless_stopped(waiting: Coroutine[Any, Any, Found], stop: asyncio.Event) -> Found | None:
    """The session `waiting` gets, or None (and no session started) once `stop` is set."""
    if stop.is_set():
        waiting.close()
        return None
    getting = asyncio.ensure_future(waiting)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # The run itself was cancelled: what it was getting goes too, not on by itself.
        getting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await getting
        raise
    finally:
        stopping.cancel()
    if getting.done():
        return getting.result()
    getting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await getting
    return None
