"""E2B's exceptions, as the `e2b` package names them."""

from __future__ import annotations


class SandboxException(Exception):
    pass


class TimeoutException(SandboxException):
    pass


class InvalidArgumentException(SandboxException):
    pass


class NotFoundException(SandboxException):
    pass


class NotEnoughSpaceException(SandboxException):
    pass


class AuthenticationException(SandboxException):
    pass


class RateLimitException(SandboxException):
    pass


class CommandExitException(SandboxException):
    """A command ended with a non-zero exit code (`commands.run`)."""

    def __init__(self, stdout: str, stderr: str, exit_code: int, error: str | None) -> None:
        super().__init__(f"command exited with code {exit_code}: {stderr or error or ''}")
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code
        self.error = error
