"""The proxy asking its parent (the bot) over its pipes: questions, answers, what goes wrong
with them, and the process that stops when its parent's end closes."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from typing import Any

import pytest

from bench.standins.doors import FixedDoors
from bot.conversations.keys import ConversationKey
from bot.metrics import Metrics
from bot.ops.egress_link import EgressLink, EgressUnavailable, doors_answer, start_egress
from egressproxy.grants import Door
from egressproxy.parent import ParentOwners
from executor.network_grants import Grant, Grants, Layer, parse_pattern

OWNER = ConversationKey("discord", "1", "2", "3")


def _asked(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


async def test_an_answer_gives_the_owners_doors_by_layer() -> None:
    out = io.StringIO()
    owners = ParentOwners(out)
    asking = asyncio.create_task(owners.grants_for("172.30.0.5"))
    await asyncio.sleep(0)
    (question,) = _asked(out)
    assert question == {"ask": 1, "address": "172.30.0.5"}
    grants = Grants(
        OWNER.id,
        (
            Grant(parse_pattern("pypi.org"), Layer.OPERATOR),
            Grant(parse_pattern("*.example.com"), Layer.CHANNEL, "u1"),
            Grant(parse_pattern("api.example.org:8443"), Layer.ONCE, "u1"),
        ),
    )
    owners.answered(json.dumps(doors_answer(1, grants)).encode())
    found = await asking
    assert found is not None
    assert found.owner == OWNER.id
    assert found.operator == (Door.parse("pypi.org"),)
    assert found.channel == (Door.parse("*.example.com"),)
    assert found.once == (Door.parse("api.example.org:8443"),)


async def test_no_owner_unanswered_and_bad_answers_open_nothing() -> None:
    out = io.StringIO()
    owners = ParentOwners(out, timeout_s=0.2)
    nobody = asyncio.create_task(owners.grants_for("172.30.0.6"))
    await asyncio.sleep(0)
    owners.answered(json.dumps(doors_answer(1, None)).encode())
    assert await nobody is None
    # No answer in time: the question fails, which refuses the request.
    with pytest.raises(TimeoutError):
        await owners.grants_for("172.30.0.7")
    # A door that is not one fails the answer, not the proxy.
    bad = asyncio.create_task(owners.grants_for("172.30.0.8"))
    await asyncio.sleep(0)
    for junk in (b"not json", b"[]", b'{"answer": "3"}', b'{"ask": 3}'):
        owners.answered(junk)  # ignored: none is the answer to question 3
    assert not bad.done()
    owners.answered(
        json.dumps({"answer": 3, "owner": "x", "channel": ["127.0.0.1:99999"]}).encode()
    )
    with pytest.raises(ValueError, match="port"):
        await bad


class Sessions:
    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = owners

    def owner_of(self, address: str) -> str | None:
        return self.owners.get(address)


def _told(owner: str, host: str, port: int, verdict: str, reason: str) -> dict[str, Any]:
    return {
        "event": "egress",
        "owner": owner,
        "host": host,
        "port": port,
        "verdict": verdict,
        "reason": reason,
        "bytes_up": 10,
        "bytes_down": 1000,
    }


async def test_the_link_counts_requests_asks_about_closed_doors_and_notes_each_refusal_once() -> (
    None
):
    doors = FixedDoors()
    metrics = Metrics()
    link = EgressLink(Sessions({}), doors, metrics=metrics)  # type: ignore[arg-type]
    closed = "data.example.com:443 is not open to this channel"
    private = "10.0.0.5:80 is a private address"
    link.heard(_told(OWNER.id, "files.example.com", 443, "allowed", "open to this channel"))
    link.heard(_told(OWNER.id, "data.example.com", 443, "refused", closed))
    link.heard(_told(OWNER.id, "data.example.com", 443, "refused", closed))
    link.heard(_told(OWNER.id, "10.0.0.5", 80, "refused", private))
    link.heard(_told("(no owner)", "data.example.com", 443, "refused", closed))
    await asyncio.sleep(0)
    assert [t[3] for t in doors.traffic] == ["allowed", "refused", "refused", "refused"]
    assert doors.traffic[0] == (OWNER.id, "files.example.com", 443, "allowed", 1010)
    # A card for the door a grant could open; none for a private address.
    assert doors.refused == [("data.example.com", 443)] * 2
    assert link.take_notes(OWNER.id) == [closed, private]
    assert link.take_notes(OWNER.id) == []
    scraped = metrics.exposition().decode()
    assert 'cellmate_egress_requests_total{platform="discord",verdict="allowed"} 1.0' in scraped
    assert 'cellmate_egress_requests_total{platform="discord",verdict="refused"} 3.0' in scraped
    assert 'cellmate_egress_bytes_total{platform="discord"} 4040.0' in scraped


async def test_the_proxy_process_asks_its_parent_and_stops_when_the_parent_goes() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "egressproxy",
        "--parent",
        "--listen",
        "127.0.0.1:0",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stdin is not None
        listening = json.loads(await asyncio.wait_for(process.stdout.readline(), 60))
        assert listening["event"] == "listening"
        reader, writer = await asyncio.open_connection("127.0.0.1", listening["port"])
        writer.write(
            b"GET http://data.example.com/ HTTP/1.1\r\n"
            b"Host: data.example.com\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        question = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
        assert question == {"ask": 1, "address": "127.0.0.1"}
        process.stdin.write(json.dumps(doors_answer(1, Grants(OWNER.id))).encode() + b"\n")
        await process.stdin.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
        assert answer.startswith(b"HTTP/1.1 403")
        assert b"data.example.com is not open to this channel" in answer
        told = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
        assert (told["event"], told["owner"], told["verdict"]) == ("egress", OWNER.id, "refused")
        writer.close()
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_allowlist_mode_refuses_to_start_on_a_backend_without_a_proxy() -> None:
    from executor import Executor, PoolSettings
    from executor.fake_backend import FakeBackend

    async with Executor("unused", backend=FakeBackend(), pool=PoolSettings(size=0)) as executor:
        with pytest.raises(EgressUnavailable, match="needs the Docker or the Kubernetes backend"):
            await start_egress(executor, FixedDoors(), 3128, "")
