"""A session's workspace kept beyond its sandbox: the files in /mnt/data, the variables that
could be pickled (opaque bytes to the host: they are only ever loaded inside a sandbox of
the same conversation), and the cells run, packed as one tar for a WorkspaceStore.

Unpacking treats the archive as untrusted (a store may be shared or tampered with): only
regular files with plain relative names come out, within the caps it is given.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

from executor.errors import WorkspaceError

MANIFEST = "manifest.json"
VARIABLES = "variables.pkl"
FILES = "files/"


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    """`CELLMATE_WORKSPACE_<FIELD>`: what is kept of a session when it ends."""

    enabled: bool = True
    """Save a session's workspace when it ends (idle, lifetime, room for another, shutdown)
    and restore it into the conversation's next session."""
    max_mb: int = 100
    """Files and variables together; past it, what does not fit is named as not saved."""
    max_files: int = 1000
    max_variables_mb: int = 32
    """Pickled variables travel as one event line: at most this much of max_mb."""
    retention_days: float = 7.0
    """A workspace not restored within this long is deleted."""
    auto_restore: bool = True
    """Restore a saved workspace into the conversation's next session; when off, the next
    run says one is saved, and /restore brings it back."""
    person_mb: int = 300
    """All saved workspaces of one person (who started each session) together: saving one
    more removes that person's oldest ones first, and their next visit there says so."""
    total_mb: int = 2000
    """All saved workspaces of the installation together: saving one more removes the
    oldest ones first, whoever they belong to."""

    def __post_init__(self) -> None:
        if min(self.max_mb, self.max_files, self.max_variables_mb) < 1:
            raise ValueError("max_mb, max_files and max_variables_mb must be at least 1")
        if min(self.person_mb, self.total_mb) < 1:
            raise ValueError("person_mb and total_mb must be at least 1")
        if self.max_variables_mb > 48:
            raise ValueError("max_variables_mb can be at most 48 (one event line)")
        if self.retention_days <= 0:
            raise ValueError("retention_days must be positive")


class WorkspaceStore(Protocol):
    """Where workspaces are kept, one per session key; the bot keeps them in its storage."""

    async def save(self, key: str, data: bytes) -> None:
        """Keep `data` as the key's workspace (replacing any); WorkspaceError if it cannot."""

    async def load(self, key: str) -> bytes | None:
        """The key's workspace, None when there is none (or it expired); WorkspaceError if
        the store cannot be read."""

    async def delete(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Workspace:
    created: float
    """When it was saved (epoch seconds)."""
    variables: bytes = b""
    saved: tuple[str, ...] = ()
    """Variables in `variables`."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Variables and files not saved, with why."""
    cells: tuple[str, ...] = ()
    files: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """What a user would call its contents: variables, then files."""
        return [*self.saved, *sorted(self.files)]


def pack(workspace: Workspace) -> bytes:
    manifest = {
        "version": 1,
        "created": workspace.created,
        "saved": list(workspace.saved),
        "skipped": dict(workspace.skipped),
        "cells": list(workspace.cells),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, MANIFEST, json.dumps(manifest).encode())
        _add(tar, VARIABLES, workspace.variables)
        for path, content in sorted(workspace.files.items()):
            _add(tar, FILES + path, content)
    return buffer.getvalue()


def unpack(data: bytes, max_files: int, max_total_bytes: int) -> Workspace:
    """The workspace in `data`; WorkspaceError when it is not one or breaks a cap."""
    manifest: dict[str, Any] | None = None
    variables = b""
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                total += member.size
                if total > max_total_bytes:
                    raise WorkspaceError("the saved workspace is larger than the cap")
                extracted = tar.extractfile(member)
                content = extracted.read() if extracted is not None else b""
                if member.name == MANIFEST:
                    manifest = json.loads(content)
                elif member.name == VARIABLES:
                    variables = content
                elif member.name.startswith(FILES) and _plain(member.name[len(FILES) :]):
                    if len(files) >= max_files:
                        raise WorkspaceError("the saved workspace has too many files")
                    files[member.name[len(FILES) :]] = content
    except (tarfile.TarError, ValueError, EOFError) as exc:
        raise WorkspaceError(f"the saved workspace cannot be read: {exc}") from exc
    if not isinstance(manifest, dict):
        raise WorkspaceError("the saved workspace has no manifest")
    return Workspace(
        created=float(manifest.get("created", time.time())),
        variables=variables,
        saved=tuple(str(name) for name in manifest.get("saved", [])),
        skipped={str(k): str(v) for k, v in dict(manifest.get("skipped", {})).items()},
        cells=tuple(str(cell) for cell in manifest.get("cells", [])),
        files=files,
    )


def _add(tar: tarfile.TarFile, name: str, content: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mode = 0o644
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(content))


def _plain(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and ".." not in parts and "\x00" not in path


NAME_SHOWN = 48
"""Characters of one variable or file name a note shows (a name can be any string)."""
REASON_SHOWN = 120
"""Characters of one reason a note shows (reasons can quote what the sandbox said), per
variable that could not be saved or loaded: many may be listed."""
FAILURE_SHOWN = 300
"""The one reason a whole save or restore failed (the store's own wording fits)."""
NAMES_ROOM = 600
MISSING_ROOM = 700
"""Characters a note gives to what came back, and to what did not: with its words, a note
stays well under one chat message (Discord's 2,000 characters)."""


def shown(text: str, limit: int) -> str:
    """`text` for one line of a note: characters that end a line or that a chat or terminal
    may not draw (controls, bidirectional and zero-width marks) as visible escapes, and at
    most `limit` characters, saying how long it was when cut."""
    pieces: list[str] = []
    size = 0
    for char in text:
        piece = _escaped(char)
        if size + len(piece) > limit:
            break
        pieces.append(piece)
        size += len(piece)
    else:
        return "".join(pieces)
    mark = f"… ({len(text):,} characters)"
    while pieces and size + len(mark) > limit:
        size -= len(pieces.pop())
    return "".join(pieces) + mark


SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    category = unicodedata.category(char)
    if category[0] != "C" and category not in ("Zl", "Zp"):
        return char
    code = ord(char)
    if char in SHORT_ESCAPES:
        return SHORT_ESCAPES[char]
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def listed(items: Sequence[str], room: int, total: int | None = None) -> str:
    """Items joined with commas within about `room` characters, then `and N more` (of
    `total`, when `items` are only the first ones)."""
    kept: list[str] = []
    used = 0
    for item in items:
        if kept and used + len(item) + 2 > room:
            break
        kept.append(item)
        used += len(item) + 2
    more = (len(items) if total is None else total) - len(kept)
    return ", ".join(kept) + (f" and {more:,} more" if more > 0 else "")


LISTED_AT_MOST = 200
"""Names considered for a note (thousands of variables are counted, not all shortened)."""


def restored_note(workspace: Workspace, restored: list[str], failed: Mapping[str, str]) -> str:
    """One line for the user: what came back, from when, and what did not; names and
    reasons shortened and made visible, and a bounded length however many there are."""
    came_back = set(restored)
    back = [name for name in workspace.names if name in came_back or name in workspace.files]
    line = f"Restored your workspace from {ago(time.time() - workspace.created)}"
    if back:
        names = [shown(name, NAME_SHOWN) for name in back[:LISTED_AT_MOST]]
        line += ": " + listed(names, NAMES_ROOM, len(back))
    else:
        line += " (it was empty)"
    missing = {**workspace.skipped, **failed}
    if missing:
        items = [
            f"{shown(name, NAME_SHOWN)} ({shown(why, REASON_SHOWN)})"
            for name, why in list(missing.items())[:LISTED_AT_MOST]
        ]
        line += "; not restored: " + listed(items, MISSING_ROOM, len(missing))
    return line + "."


def saved_note(workspace: Workspace) -> str:
    """Without automatic restore: that a workspace is saved, what it holds, and how to get
    it back; as bounded as `restored_note`."""
    everything = workspace.names
    names = [shown(name, NAME_SHOWN) for name in everything[:LISTED_AT_MOST]]
    held = listed(names, NAMES_ROOM, len(everything)) if names else "empty"
    return (
        f"A workspace from {ago(time.time() - workspace.created)} is saved ({held}): "
        "/restore brings it back."
    )


def failure_reason(why: object) -> str:
    """A reason quoted in a note (it may hold what the sandbox or the store said), bounded."""
    return shown(str(why), FAILURE_SHOWN)


def ago(seconds: float) -> str:
    """`20 min ago`, for people."""
    if seconds < 90:
        return "a moment ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"
