"""Names and keys that no user input can steer.

A user (or sandboxed code) chooses file names; a stored object's key is
`<conversation hash>/<run id>/<sanitised name>`, where the conversation part is a hash of the
platform's conversation id and the run id is random, so one conversation's links cannot be
derived from another's, and no name can climb out of its folder.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import unicodedata
from pathlib import PurePosixPath

from storage.errors import InvalidKey

MAX_NAME_LENGTH = 120
SAFE_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._ ()-]+")


def safe_name(name: str | bytes, fallback: str = "file") -> str:
    """A plain file name from anything: only its last path part, safe characters, bounded.

    Keeps the extension, turns the rest of unusual characters into `_`; never empty, never
    hidden (leading dot), never `..`.
    """
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    name = unicodedata.normalize("NFKC", name).replace("\\", "/")
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")
    name = PurePosixPath(name).name if "/" in name else name
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem.strip(" ._") or len(suffix) > 10:
        stem, suffix = name, ""
    stem, suffix = _clean(stem), _clean(suffix)
    stem = stem[: MAX_NAME_LENGTH - len(suffix) - 1].rstrip(" ._-") or fallback
    return f"{stem}.{suffix}" if suffix else stem


def _clean(part: str) -> str:
    ascii_part = unicodedata.normalize("NFKD", part).encode("ascii", "ignore").decode()
    cleaned = UNSAFE_CHARACTERS.sub("_", ascii_part).strip(" ._")
    return re.sub(r"\s+", "-", cleaned)


def conversation_prefix(conversation: str) -> str:
    """A stable folder name for a conversation id, revealing nothing of it."""
    return hashlib.sha256(conversation.encode("utf-8")).hexdigest()[:24]


def new_run_id() -> str:
    return secrets.token_hex(8)


def artifact_key(conversation: str, run_id: str, name: str) -> str:
    return check_key(f"{conversation_prefix(conversation)}/{run_id}/{safe_name(name)}")


def check_key(key: str) -> str:
    """Return the key if every part is made of safe characters, else raise InvalidKey."""
    parts = key.split("/")
    if not key or len(key) > 512 or not all(SAFE_PART.match(part) for part in parts):
        raise InvalidKey(f"storage key {key[:80]!r} is not allowed")
    if any(part in (".", "..") for part in parts):
        raise InvalidKey(f"storage key {key[:80]!r} is not allowed")
    return key


def unique_names(names: list[str]) -> list[str]:
    """Sanitised names made unique in order: `data.csv`, `data-2.csv`, ..."""
    seen: set[str] = set()
    result = []
    for name in names:
        candidate = safe_name(name)
        stem, dot, suffix = candidate.rpartition(".")
        if not dot:
            stem, suffix = candidate, ""
        counter = 2
        while candidate.lower() in seen:
            candidate = f"{stem}-{counter}{'.' + suffix if suffix else ''}"
            counter += 1
        seen.add(candidate.lower())
        result.append(candidate)
    return result
