"""Run untrusted Python in hardened, short-lived sandboxes and get structured results.

async with Executor(image=default_tag()) as executor:
    result = await executor.run_notebook(["print(1 + 1)"], files={"data.csv": b"a,b\n1,2\n"})
    print(result.status, result.stdout)
"""

from executor.errors import (
    EngineUnavailable,
    ExecutorError,
    FreezeFailed,
    ImageBuildError,
    ImageNotFound,
    InvalidInput,
    SandboxBusy,
    SandboxError,
    SandboxTaken,
)
from executor.executor import Executor, PoolSettings, Session
from executor.image import default_tag
from executor.limits import SandboxLimits
from executor.models import (
    ExecutionError,
    ExecutionResult,
    FileInfo,
    InputAsked,
    InputExchange,
    OutputEvent,
    OutputFile,
    RichResult,
    SkippedFile,
    Status,
)
from executor.run_input import RunClock
from executor.run_scope import RunScope, language_named

__all__ = [
    "EngineUnavailable",
    "ExecutionError",
    "ExecutionResult",
    "Executor",
    "ExecutorError",
    "FileInfo",
    "FreezeFailed",
    "ImageBuildError",
    "ImageNotFound",
    "InputAsked",
    "InputExchange",
    "InvalidInput",
    "OutputEvent",
    "OutputFile",
    "PoolSettings",
    "RichResult",
    "RunClock",
    "RunScope",
    "SandboxBusy",
    "SandboxError",
    "SandboxLimits",
    "SandboxTaken",
    "Session",
    "SkippedFile",
    "Status",
    "default_tag",
    "language_named",
]
