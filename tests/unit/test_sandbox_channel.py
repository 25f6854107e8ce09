"""The sealed line protocol between the host and the runner, and what the engine is asked
for on behalf of the sandbox user."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from bot.settings import load_settings
from executor.docker_backend import sandbox_specs
from executor.limits import SandboxLimits
from executor.stdio import RunnerStream, seal

KEY = os.urandom(32)


def frame(payload: bytes) -> bytes:
    return bytes([1, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def ready() -> bytes:
    return json.dumps({"type": "ready", "key": KEY.hex()}).encode() + b"\n"


def sealed(seq: int, event: dict[str, Any], key: bytes = KEY) -> bytes:
    return seal(key, seq, json.dumps(event).encode())


async def events_of(*lines: bytes) -> list[dict[str, Any]]:
    reader = asyncio.StreamReader()
    reader.feed_data(frame(b"".join(lines)))
    reader.feed_eof()
    stream = RunnerStream(reader)
    found = []
    while (event := await stream.receive()) is not None:
        found.append(event)
    return found


async def test_after_ready_only_sealed_events_count() -> None:
    done = {"type": "done", "id": "r1", "status": "ok"}
    events = await events_of(
        ready(),
        json.dumps(done).encode() + b"\n",  # forged: not sealed
        sealed(1, done, key=os.urandom(32)),  # forged: another key
        sealed(1, {"type": "output", "id": "r1"}),
        sealed(1, {"type": "output", "id": "r1"}),  # replayed
        b"0" * 64 + b" 2 " + json.dumps(done).encode() + b"\n",  # a made-up seal
        sealed(5, done),
    )
    assert events == [{"type": "ready"}, {"type": "output", "id": "r1"}, done]


async def test_requests_are_sealed_once_the_key_is_known() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(frame(ready()))
    stream = RunnerStream(reader)
    assert stream.request_line({"op": "x"}) == b'{"op": "x"}\n'
    assert await stream.receive() == {"type": "ready"}
    first, second = stream.request_line({"op": "run"}), stream.request_line({"op": "run"})
    assert first == seal(KEY, 1, b'{"op": "run"}')
    assert second == seal(KEY, 2, b'{"op": "run"}')


def test_the_sandbox_runs_as_the_configured_user_under_its_own_init() -> None:
    volume, container = sandbox_specs("image", "name", SandboxLimits(), {})
    assert container["user"] == "61000:61000"
    assert "uid=61000,gid=61000," in volume["driver_opts"]["o"]
    assert container["init"] is False
    settings = load_settings(
        {"CELLMATE_SANDBOX_UID": "62000", "CELLMATE_SANDBOX_GID": "62001"}, env_file=None
    )
    volume, container = sandbox_specs("image", "name", settings.sandbox, {})
    assert container["user"] == "62000:62001"
    assert "uid=62000,gid=62001," in volume["driver_opts"]["o"]


@pytest.mark.parametrize("field", ["uid", "gid"])
def test_root_is_never_the_sandbox_user(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be positive"):
        SandboxLimits(**{field: 0})
