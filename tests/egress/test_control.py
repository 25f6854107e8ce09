"""The proxy on its own (a Deployment, as on Kubernetes), asking the bot that connects to
its control port: only a connection that shows the token is heard, the bot's link answers
and hears as it does over pipes, a newer bot replaces an older one, and while no bot is
connected every request is refused at once."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.standins.doors import FixedDoors
from bench.standins.ports import free_port
from bot.conversations.keys import ConversationKey
from bot.ops.egress_link import EgressLink, EgressUnavailable
from egressproxy import bridges
from executor import egress

OWNER = ConversationKey("slack", "T1", "C1", "1700000000.000100")
TOKEN = "k8s-" + "5" * 40


class Sessions:
    def owner_of(self, address: str) -> str | None:
        return OWNER.id if address == "127.0.0.1" else None


@dataclass
class Proxy:
    listen: int
    control: int
    process: asyncio.subprocess.Process


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[Proxy]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    listen, control = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "egressproxy",
        "--listen",
        f"127.0.0.1:{listen}",
        "--control",
        f"127.0.0.1:{control}",
        "--control-token-file",
        str(token_file),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(60):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", control)
                except OSError:
                    assert process.returncode is None, "the proxy exited"
                    await asyncio.sleep(0.1)
                    continue
                writer.close()
                await writer.wait_closed()
                break
        yield Proxy(listen, control, process)
    finally:
        process.terminate()
        await process.communicate()


async def fetch(port: int, host: str = "data.example.com") -> bytes:
    """A plain HTTP request through the proxy, as a sandbox makes it: the proxy's answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
        await writer.wait_closed()


def forged_greetings(challenge: str) -> list[bytes]:
    """What a stranger may answer a challenge with, without the token."""
    mine = "c" * 32

    def line(message: object) -> bytes:
        return json.dumps(message).encode() + b"\n"

    return [
        b"",  # closes its side at once
        b"\n",
        b"not json\n",
        b"[]\n",
        line({"hello": 1234, "challenge": mine}),
        line({"hello": TOKEN}),  # the token itself, as once sent
        line({"hello": mac("other-token-" + "x" * 30, challenge, mine), "challenge": mine}),
        line({"hello": mac(TOKEN, challenge, mine), "challenge": "short"}),
        # A replay of an answer to another challenge.
        line({"hello": mac(TOKEN, "another challenge", mine), "challenge": mine}),
        line({"answer": 1, "owner": "slack:T1:C1:x", "operator": ["*"]}),  # answers at once
    ]


def mac(token: str, theirs: str, mine: str) -> str:
    return hmac.new(token.encode(), f"initiator {theirs} {mine}".encode(), "sha256").hexdigest()


@pytest.mark.parametrize("variant", range(len(forged_greetings("x"))))
async def test_a_connection_without_the_token_is_closed_unheard(proxy: Proxy, variant: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.control)
    try:
        challenge = json.loads(await asyncio.wait_for(reader.readline(), 30))["challenge"]
        forged = forged_greetings(challenge)[variant]
        writer.write(forged)
        if not forged:
            writer.write_eof()
        await writer.drain()
        # Closed without another word: no proof, and never asked anything.
        assert await asyncio.wait_for(reader.read(), 30) == b""
    finally:
        writer.close()
    refused = await fetch(proxy.listen)
    assert refused.startswith(b"HTTP/1.1 403"), refused[:200]
    assert b"is not open to this channel" not in refused  # nobody answered for an owner


async def test_the_bots_link_answers_and_hears_over_the_control_port(proxy: Proxy) -> None:
    doors = FixedDoors()
    link = EgressLink(Sessions(), doors)  # type: ignore[arg-type]
    try:
        address = await link.connect(("10.96.0.10", 3128), ("127.0.0.1", proxy.control), TOKEN)
        assert address == ("10.96.0.10", 3128)  # what sandboxes are told to use
        refused = await fetch(proxy.listen)
        assert refused.startswith(b"HTTP/1.1 403"), refused[:200]
        assert b"data.example.com is not open to this channel" in refused
        async with asyncio.timeout(30):
            while not doors.refused:  # noqa: ASYNC110 (told after the answer is sent)
                await asyncio.sleep(0.05)
        assert doors.refused == [("data.example.com", 80)]
        assert doors.traffic[0][:4] == (OWNER.id, "data.example.com", 80, "refused")
    finally:
        await link.close()


async def test_a_newer_bot_replaces_the_older_and_without_one_all_is_refused(
    proxy: Proxy,
) -> None:
    first_doors, second_doors = FixedDoors(), FixedDoors()
    first = EgressLink(Sessions(), first_doors)  # type: ignore[arg-type]
    second = EgressLink(Sessions(), second_doors)  # type: ignore[arg-type]
    try:
        await first.connect(("10.96.0.10", 3128), ("127.0.0.1", proxy.control), TOKEN)
        await second.connect(("10.96.0.10", 3128), ("127.0.0.1", proxy.control), TOKEN)
        refused = await fetch(proxy.listen)
        assert b"is not open to this channel" in refused  # an owner was found: asked
        async with asyncio.timeout(30):
            while not second_doors.refused:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert first_doors.refused == []
    finally:
        await first.close()
        await second.close()
    # No bot: refused at once, since nobody can say whose sandbox asks.
    alone = await fetch(proxy.listen)
    assert alone.startswith(b"HTTP/1.1 403"), alone[:200]
    assert b"is not open to this channel" not in alone


async def test_a_proxy_that_does_not_answer_is_a_clear_failure() -> None:
    link = EgressLink(Sessions(), FixedDoors())  # type: ignore[arg-type]
    with pytest.raises(EgressUnavailable, match="could not reach the egress proxy's control port"):
        await link.connect(("10.96.0.10", 3128), ("127.0.0.1", free_port()), TOKEN)
    await link.close()


@pytest.mark.parametrize(
    ("token", "why"),
    [("short", "shorter than 32 characters"), (None, "need --control-token-file")],
)
async def test_the_proxy_will_not_serve_the_control_port_without_a_real_token(
    tmp_path: Path, token: str | None, why: str
) -> None:
    options = ["--control", f"127.0.0.1:{free_port()}"]
    if token is not None:
        (tmp_path / "token").write_text(token)
        options += ["--control-token-file", str(tmp_path / "token")]
    command = [sys.executable, "-m", "egressproxy", "--listen", "127.0.0.1:0", *options]
    process = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode != 0
    assert why in err.decode()


async def test_a_proxy_beside_the_engine_dials_the_bot_with_the_token(tmp_path: Path) -> None:
    """Compose: the proxy connects to the bot's control port; the bot hears only a proxy
    that shows the token, and answers it as it answers its own child."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    doors = FixedDoors()
    link = EgressLink(Sessions(), doors)  # type: ignore[arg-type]
    listen, control = free_port(), free_port()
    await link.accept(("172.30.0.1", 3128), ("127.0.0.1", control), TOKEN)
    # A stranger on the bot's control port is closed unheard, and no door is asked about.
    reader, writer = await asyncio.open_connection("127.0.0.1", control)
    challenge = json.loads(await asyncio.wait_for(reader.readline(), 30))["challenge"]
    assert TOKEN not in challenge
    writer.write(json.dumps({"hello": TOKEN, "challenge": "d" * 32}).encode() + b"\n")
    forged = {
        "event": "egress",
        "owner": OWNER.id,
        "host": "a.test",
        "port": 443,
        "verdict": "refused",
        "reason": "a.test is not open to this channel",
    }
    writer.write(json.dumps(forged).encode() + b"\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()
    assert doors.refused == []
    process = await dialling_proxy(listen, control, token_file)
    try:
        async with asyncio.timeout(60):
            while True:  # until the proxy listens and has dialled the bot
                answer = b""
                with contextlib.suppress(OSError):
                    answer = await fetch(listen)
                if b"is not open to this channel" in answer:
                    break
                await asyncio.sleep(0.1)
        async with asyncio.timeout(30):
            while not doors.refused:  # noqa: ASYNC110 (told after the answer is sent)
                await asyncio.sleep(0.05)
        assert doors.refused[0] == ("data.example.com", 80)
    finally:
        process.terminate()
        await process.wait()
        await link.close()


def test_the_proxy_finds_the_bridge_by_the_executors_name_for_it() -> None:
    for instance in ("default", "cellmate-tests-gw0-compose", "a" * 200):
        assert bridges.bridge_name(instance) == egress.bridge_name(instance)
    assert bridges.interface_address("lo") == "127.0.0.1"
    assert bridges.interface_address("cellmate-none0") is None


async def dialling_proxy(listen: int, bot: int, token_file: Path) -> asyncio.subprocess.Process:
    """The proxy as Compose runs it: listening on `listen`, dialling the bot's port `bot`."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "egressproxy", "--listen", f"127.0.0.1:{listen}",
        "--dial-bot", f"127.0.0.1:{bot}", "--control-token-file", str(token_file),
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def squatter(seen: bytearray) -> tuple[asyncio.Server, int]:
    """A stranger on the port the other side expects: it challenges, records what comes
    back, and sends a proof it cannot have made, then answers for any sandbox."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(json.dumps({"challenge": "e" * 32}).encode() + b"\n")
        with contextlib.suppress(ConnectionError, TimeoutError):
            seen.extend(await asyncio.wait_for(reader.readline(), 10))
            writer.write(json.dumps({"proof": "0" * 64}).encode() + b"\n")
            writer.write(b'{"answer": 1, "owner": "slack:T1:C1:x", "operator": ["*"]}\n')
            await writer.drain()
            seen.extend(await asyncio.wait_for(reader.read(), 10))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_whoever_takes_the_bots_port_learns_no_token_and_opens_nothing(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    seen = bytearray()
    server, port = await squatter(seen)
    listen = free_port()
    process = await dialling_proxy(listen, port, token_file)
    try:
        async with asyncio.timeout(60):
            while not seen:  # noqa: ASYNC110 (the proxy dials when it is up)
                await asyncio.sleep(0.1)
            answer = b""
            while not answer:
                with contextlib.suppress(OSError):
                    answer = await fetch(listen)
        assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
        assert b"is not open to this channel" not in answer  # the squatter's answer: ignored
        assert TOKEN.encode() not in bytes(seen)
    finally:
        process.terminate()
        await process.wait()
        server.close()


async def test_whoever_takes_the_proxys_port_learns_no_token() -> None:
    seen = bytearray()
    server, port = await squatter(seen)
    link = EgressLink(Sessions(), FixedDoors())  # type: ignore[arg-type]
    try:
        with pytest.raises(EgressUnavailable, match="not the egress proxy's control port"):
            await link.connect(("10.96.0.10", 3128), ("127.0.0.1", port), TOKEN)
        assert seen  # it did answer the challenge
        assert TOKEN.encode() not in bytes(seen)
    finally:
        await link.close()
        server.close()
