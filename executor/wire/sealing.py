"""Sealing: the hello that gives the runner its key, and every later line's HMAC and number
(see the package docstring)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

KEY_BYTES = 32
MAX_SEQ_DIGITS = 20


def seal(key: bytes, seq: int, payload: bytes) -> bytes:
    """One sealed line (with its newline)."""
    head = str(seq).encode()
    mac = hmac.new(key, head + b" " + payload, hashlib.sha256).hexdigest().encode()
    return mac + b" " + head + b" " + payload + b"\n"


def unseal(key: bytes, line: bytes, last_seq: int) -> tuple[int, bytes] | None:
    """The number and payload of a line sealed with `key` after `last_seq`; None for any
    other line."""
    mac, _, rest = line.rstrip(b"\n").partition(b" ")
    head, _, payload = rest.partition(b" ")
    if not head.isdigit() or len(head) > MAX_SEQ_DIGITS:
        return None
    expected = hmac.new(key, head + b" " + payload, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, expected) or int(head) <= last_seq:
        return None
    return int(head), payload


def hello_line(key: bytes) -> bytes:
    """The host's first line: the key, unsealed (before any user code exists)."""
    return json.dumps({"op": "hello", "key": key.hex()}).encode() + b"\n"


def hello_key(line: bytes) -> bytes | None:
    """The key in a hello line, if it is one."""
    try:
        hello = json.loads(line)
        key = bytes.fromhex(hello["key"]) if hello.get("op") == "hello" else b""
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return key if len(key) == KEY_BYTES else None


def dumps(message: Mapping[str, Any]) -> bytes:
    """A message's JSON (what a line seals). Values JSON has no type for become strings."""
    return json.dumps(message, default=str).encode()


def loads(payload: bytes) -> dict[str, Any] | None:
    """The JSON object of an opened line, or None."""
    try:
        found = json.loads(payload)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


class Sealer:
    """One side's outgoing numbering under a key."""

    def __init__(self, key: bytes, seq: int = 0) -> None:
        self.key = key
        self.seq = seq

    def line(self, message: Mapping[str, Any]) -> bytes:
        self.seq += 1
        return seal(self.key, self.seq, dumps(message))


class Opener:
    """One side's incoming numbering under a key: only lines sealed with a higher number."""

    def __init__(self, key: bytes, seq: int = 0) -> None:
        self.key = key
        self.seq = seq

    def open(self, line: bytes) -> bytes | None:
        opened = unseal(self.key, line, self.seq)
        if opened is None:
            return None
        self.seq, payload = opened
        return payload
