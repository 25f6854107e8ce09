"""The sealed line protocol between the host and the runner, and what the engine is asked
for on behalf of the sandbox user."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from bot.settings import load_settings
from executor.docker_specs import sandbox_specs
from executor.limits import SandboxLimits
from executor.stdio import RunnerStream, seal

KEY = os.urandom(32)


def frame(payload: bytes) -> bytes:
    return bytes([1, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def offered_key() -> bytes:
    """A `ready` that offers a key of its own, as code that writes to the runner's stdout
    might: never believed."""
    return json.dumps({"type": "ready", "key": os.urandom(32).hex()}).encode() + b"\n"


def sealed(seq: int, event: dict[str, Any], key: bytes = KEY) -> bytes:
    return seal(key, seq, json.dumps(event).encode())


async def events_of(*lines: bytes) -> list[dict[str, Any]]:
    reader = asyncio.StreamReader()
    reader.feed_data(frame(b"".join(lines)))
    reader.feed_eof()
    stream = RunnerStream(reader, key=KEY)
    found = []
    while (event := await stream.receive()) is not None:
        found.append(event)
    return found


async def test_only_events_sealed_with_the_hosts_key_count() -> None:
    done = {"type": "done", "id": "r1", "status": "ok"}
    events = await events_of(
        offered_key(),
        sealed(1, {"type": "ready"}),
        json.dumps(done).encode() + b"\n",  # forged: not sealed
        sealed(2, done, key=os.urandom(32)),  # forged: another key
        sealed(2, {"type": "output", "id": "r1"}),
        sealed(2, {"type": "output", "id": "r1"}),  # replayed
        b"0" * 64 + b" 3 " + json.dumps(done).encode() + b"\n",  # a made-up seal
        sealed(3, done),
    )
    assert events == [{"type": "ready"}, {"type": "output", "id": "r1"}, done]


async def test_the_hello_carries_the_key_and_every_request_is_sealed() -> None:
    stream = RunnerStream(asyncio.StreamReader(), key=KEY)
    assert json.loads(stream.hello_line()) == {"op": "hello", "key": KEY.hex()}
    assert stream.hello_line().endswith(b"}\n")
    first, second = stream.request_line({"op": "run"}), stream.request_line({"op": "run"})
    assert first == seal(KEY, 1, b'{"op": "run"}')
    assert second == seal(KEY, 2, b'{"op": "run"}')


async def test_a_key_given_in_the_hello_seals_ready_and_an_unsealed_key_is_ignored() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(frame(offered_key() + sealed(1, {"type": "ready", "python": "3.11"})))
    reader.feed_eof()
    stream = RunnerStream(reader, key=KEY)
    assert await stream.receive() == {"type": "ready", "python": "3.11"}
    assert await stream.receive() is None


def resumed(nonce: str, session: str = "c1") -> dict[str, Any]:
    return {"type": "resumed", "nonce": nonce, "session": session, "busy": False}


async def test_attaching_again_trusts_only_the_sealed_answer_to_its_own_nonce() -> None:
    """A second host knows the key but not the numbers: only the sealed `resumed` that
    repeats its fresh nonce starts them; lines from before, forged, replayed or lower
    ones do not count."""
    reader = asyncio.StreamReader()
    stream = RunnerStream(reader, key=KEY)
    request = stream.resume_line("n2")
    _, seq, payload = request.rstrip(b"\n").split(b" ", 2)
    assert json.loads(payload) == {"op": "resume", "nonce": "n2"}
    assert request == seal(KEY, int(seq), payload)
    assert int(seq) > 10**18  # above any number an earlier host can have used
    done = {"type": "done", "id": "r1", "status": "ok"}
    reader.feed_data(
        frame(
            sealed(40, done)  # written before this host asked
            + json.dumps(resumed("n2", "someone-else")).encode()
            + b"\n"  # not sealed
            + sealed(41, resumed("n2", "other"), key=os.urandom(32))  # another key
            + sealed(42, resumed("n1", "old"))  # an answer to an earlier host
            + sealed(43, resumed("n2"))
            + sealed(43, done)  # replayed number
            + sealed(44, done)
        )
    )
    reader.feed_eof()
    assert await stream.receive() == resumed("n2")
    assert await stream.receive() == done
    assert await stream.receive() is None
    following = stream.request_line({"op": "run"})
    assert following.split(b" ")[1] == str(int(seq) + 1).encode()


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
        SandboxLimits(uid=0) if field == "uid" else SandboxLimits(gid=0)


def test_docker_sandboxes_wait_for_the_hosts_key_and_keep_no_log() -> None:
    """The key travels only on stdin, and the stdout that carries users' output is not
    stored by the engine."""
    _, container = sandbox_specs("image", "name", SandboxLimits(), {})
    assert container["environment"]["CELLMATE_RUNNER_AWAIT_HELLO"] == "1"
    assert container["log_config"]["Type"] == "none"
    assert not container["log_config"].get("Config")
    assert container["tty"] is False
