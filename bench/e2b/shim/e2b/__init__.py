"""`e2b`: the exceptions and connection settings E2B's code-interpreter tests import."""

from bench.e2b.errors import (
    AuthenticationException,
    CommandExitException,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    TimeoutException,
)
from bench.e2b.sandbox import CommandResult, EntryInfo, WriteInfo

from .connection_config import ConnectionConfig

__all__ = [
    "AuthenticationException",
    "CommandExitException",
    "CommandResult",
    "ConnectionConfig",
    "EntryInfo",
    "InvalidArgumentException",
    "NotEnoughSpaceException",
    "NotFoundException",
    "RateLimitException",
    "SandboxException",
    "TimeoutException",
    "WriteInfo",
]
