"""Freezing a sandbox for a file operation: a runtime that refuses for a moment is asked
again, within a bound; one that keeps refusing costs that one operation, named in the
message, and never the session."""

from __future__ import annotations

import asyncio
import io
import tarfile
from typing import Any

import docker.errors
import pytest

from executor import docker_sandbox
from executor.archive import OutputCaps
from executor.backoff import Backoff
from executor.docker_sandbox import DockerSandbox
from executor.errors import FreezeFailed

CAPS = OutputCaps(max_files=10, max_file_bytes=1000, max_total_bytes=1000, max_depth=4)
UNABLE = "OCI runtime pause failed: unable to freeze: unknown"


def empty_tar() -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w"):
        pass
    return data.getvalue()


class Container:
    """An engine's container whose pause fails `refusals` times first."""

    def __init__(self, refusals: int, state: dict[str, Any] | None = None) -> None:
        self.id = "c0ffee" * 8
        self.refusals = refusals
        self.state = state or {"Running": True, "Paused": False}
        self.calls: list[str] = []
        self.attrs: dict[str, Any] = {}

    def pause(self) -> None:
        self.calls.append("pause")
        if self.refusals:
            self.refusals -= 1
            raise docker.errors.APIError("500 Server Error", explanation=UNABLE)

    def unpause(self) -> None:
        self.calls.append("unpause")

    def reload(self) -> None:
        self.attrs = {"State": dict(self.state)}

    def put_archive(self, path: str, data: bytes) -> bool:
        self.calls.append(f"put {path}")
        return True

    def get_archive(self, path: str) -> tuple[Any, dict[str, Any]]:
        self.calls.append(f"get {path}")
        return iter([empty_tar()]), {}


class Writer:
    def close(self) -> None: ...


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between attempts, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(docker_sandbox, "_wait", slept.append)
    return slept


def sandbox_on(container: Container) -> DockerSandbox:
    return DockerSandbox(
        None,  # type: ignore[arg-type]
        container,  # type: ignore[arg-type]
        "cellmate-0123456789abcdef",
        asyncio.StreamReader(),
        Writer(),  # type: ignore[arg-type]
        bytes(32),
    )


def test_the_retry_is_bounded_and_grows() -> None:
    waits = list(docker_sandbox.FREEZE_RETRY.waits())
    assert waits[0] == 0
    assert waits[1:] == sorted(waits[1:])
    assert len(waits) == docker_sandbox.FREEZE_RETRY.attempts <= 10
    assert 0.5 <= docker_sandbox.FREEZE_RETRY.total_s <= 5
    assert list(Backoff(attempts=5, first_s=0.5, factor=3, max_s=2).waits()) == [
        0,
        0.5,
        1.5,
        2,
        2,
    ]
    with pytest.raises(ValueError, match="at least one"):
        Backoff(attempts=0, first_s=1)


@pytest.mark.parametrize("refusals", [1, 2, 5])
async def test_a_freeze_refused_for_a_moment_is_asked_again(
    refusals: int, waits: list[float]
) -> None:
    container = Container(refusals)
    sandbox = sandbox_on(container)
    await sandbox.put_files(empty_tar())
    await sandbox.get_files(CAPS)
    assert container.calls == ["pause"] * (refusals + 1) + [
        "put /mnt/data",
        "unpause",
        "pause",
        "get /mnt/data",
        "unpause",
    ]
    assert waits == list(docker_sandbox.FREEZE_RETRY.waits())[1 : refusals + 1]


@pytest.mark.parametrize(
    ("operation", "doing"),
    [("put", "too busy to write files into it"), ("get", "too busy to read its files")],
)
async def test_a_freeze_that_keeps_failing_refuses_only_that_operation(
    operation: str, doing: str, waits: list[float]
) -> None:
    container = Container(refusals=100)
    sandbox = sandbox_on(container)
    call = sandbox.put_files(empty_tar()) if operation == "put" else sandbox.get_files(CAPS)
    with pytest.raises(FreezeFailed) as failed:
        await call
    message = str(failed.value)
    assert doing in message
    assert "unable to freeze" in message
    assert "the session goes on" in message
    # Never done unfrozen, and never thawed (nothing was frozen); the sandbox is not killed.
    assert set(container.calls) == {"pause"}
    assert len(container.calls) == docker_sandbox.FREEZE_RETRY.attempts
    assert len(waits) == docker_sandbox.FREEZE_RETRY.attempts - 1
    assert sandbox.alive


@pytest.mark.parametrize(
    "state", [{"Running": False, "Paused": False}, {"Running": True, "Paused": True}]
)
async def test_a_sandbox_that_is_already_still_is_not_frozen_again(
    state: dict[str, Any], waits: list[float]
) -> None:
    container = Container(refusals=100, state=state)
    sandbox = sandbox_on(container)
    await sandbox.put_files(empty_tar())
    assert container.calls == ["pause", "put /mnt/data"]
    assert waits == []
