"""Infrastructure failures. A failure in user code is never raised: it is a result.

ExecutorError(Exception)
├── EngineUnavailable(ExecutorError, ConnectionError)   no Docker engine answers
├── ImageNotFound(ExecutorError, LookupError)           the sandbox image is not built
├── ImageBuildError(ExecutorError)                      the sandbox image could not be built
├── InvalidInput(ExecutorError, ValueError)             input files refused (name, size, count)
├── SandboxError(ExecutorError, RuntimeError)           a sandbox failed to start or speak
│   ├── FreezeFailed(SandboxError)                      one file operation refused: no freeze
│   └── SnapshotFailed(SandboxError)                    no memory snapshot taken or restored
├── SandboxBusy(ExecutorError, RuntimeError)            every slot taken and the line full
├── SandboxTaken(ExecutorError)                         another replica took the session over
└── WorkspaceError(ExecutorError)                       a workspace not saved, found or read
"""

from __future__ import annotations


class ExecutorError(Exception):
    """Base of every infrastructure failure of the executor."""


class EngineUnavailable(ExecutorError, ConnectionError):
    """No Docker engine answers."""


class ImageNotFound(ExecutorError, LookupError):
    """The sandbox image is missing; `cellmate build-image` builds it."""


class ImageBuildError(ExecutorError):
    """The sandbox image could not be built."""


class InvalidInput(ExecutorError, ValueError):
    """Input files were refused before any sandbox started."""


class SandboxError(ExecutorError, RuntimeError):
    """A sandbox could not start, or its runner broke the protocol."""


class ChannelDamaged(SandboxError):
    """Lines the runner sealed never arrived whole: something in the sandbox wrote into the
    channel the runner answers on, so what it said can no longer be trusted to be complete."""


class FreezeFailed(SandboxError):
    """The engine could not freeze the sandbox for one file operation, which was not done;
    the session and its files are as they were."""


class SandboxBusy(ExecutorError, RuntimeError):
    """Every sandbox slot is in use and the waiting line is full; try again later."""


class SandboxTaken(ExecutorError):
    """Another of the bot's replicas took over this session's sandbox (its runner answered
    that replica's `resume`): nothing is wrong with the sandbox, so it is let go, never
    stopped. Not a SandboxError, which ends the sandbox."""


class WorkspaceError(ExecutorError):
    """A session's workspace could not be saved, found or read (the store says why)."""


class SnapshotFailed(SandboxError):
    """A sandbox could not be paused to a memory snapshot, or restored from one (the message
    says why); the session falls back to its workspace (files and pickled variables)."""
