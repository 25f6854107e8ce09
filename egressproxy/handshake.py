"""How the bot and a proxy that runs on its own know each other on a TCP connection: each
proves it holds the shared token without sending it, so whoever took the other's port
learns nothing it could replay.

    acceptor  -> initiator   {"challenge": A}
    initiator -> acceptor    {"hello": HMAC(token, "initiator A I"), "challenge": I}
    acceptor  -> initiator   {"proof": HMAC(token, "acceptor I A")}

A and I are fresh random nonces; a side that gets anything else, or nothing in time, closes
the connection. Standard library only: both the bot and the proxy's own environment use it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets

TIMEOUT_S = 5.0


class NotTheirs(Exception):
    """The other side did not prove it holds the token."""


def _mac(token: bytes, role: str, first: str, second: str) -> str:
    return hmac.new(token, f"{role} {first} {second}".encode(), hashlib.sha256).hexdigest()


async def _read(reader: asyncio.StreamReader) -> dict[str, object]:
    try:
        line = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
        found = json.loads(line) if line else None
    except (TimeoutError, ValueError, ConnectionError) as exc:
        raise NotTheirs(f"no answer ({type(exc).__name__})") from None
    if not isinstance(found, dict):
        raise NotTheirs("no answer")
    return found


def _send(writer: asyncio.StreamWriter, message: dict[str, str]) -> None:
    writer.write((json.dumps(message) + "\n").encode())


async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: bytes) -> None:
    """The side that listened: challenge, check the answer, prove itself; NotTheirs if the
    other side does not hold the token."""
    mine = secrets.token_hex(16)
    _send(writer, {"challenge": mine})
    await writer.drain()
    found = await _read(reader)
    theirs, hello = found.get("challenge"), found.get("hello")
    if not isinstance(theirs, str) or not isinstance(hello, str) or not 16 <= len(theirs) <= 64:
        raise NotTheirs("no greeting")
    if not hmac.compare_digest(hello, _mac(token, "initiator", mine, theirs)):
        raise NotTheirs("a greeting without the token")
    _send(writer, {"proof": _mac(token, "acceptor", theirs, mine)})
    await writer.drain()


async def initiate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: bytes
) -> None:
    """The side that connected: answer the challenge, check the proof; NotTheirs if the
    other side does not hold the token."""
    found = await _read(reader)
    theirs = found.get("challenge")
    if not isinstance(theirs, str) or not 16 <= len(theirs) <= 64:
        raise NotTheirs("no challenge")
    mine = secrets.token_hex(16)
    _send(writer, {"hello": _mac(token, "initiator", theirs, mine), "challenge": mine})
    await writer.drain()
    proof = (await _read(reader)).get("proof")
    if not isinstance(proof, str) or not hmac.compare_digest(
        proof, _mac(token, "acceptor", mine, theirs)
    ):
        raise NotTheirs("no proof of the token")
