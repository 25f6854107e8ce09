"""A session's workspace kept beyond its sandbox: the files in /mnt/data, the variables that
could be pickled, and R's (an .RData file) when R ran (opaque bytes to the host: they are
only ever loaded inside a sandbox of the same conversation), and the cells run, packed as
one tar for a WorkspaceStore.

Unpacking treats the archive as untrusted (a store may be shared or tampered with): only
regular files with plain relative names come out, within the caps it is given.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

from executor.errors import WorkspaceError
from executor.protocol import PausedSandbox
from executor.wire import pins

MANIFEST = "manifest.json"
VARIABLES = "variables.pkl"
R_VARIABLES = "variables.RData"
R_VARIABLES_NOTE = "R variables"
"""The name a failed save or load of all of R's variables is noted under."""
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
    packages: tuple[str, ...] = ()
    """What the session installed with pip (`name==version`): installed again on restore."""
    paused: PausedSandbox | None = None
    """The memory snapshot the session was paused to, which its next run resumes; the
    files and variables here are what comes back when it cannot be."""
    r_variables: bytes = b""
    r_saved: tuple[str, ...] = ()
    """R's variables in `r_variables`."""

    @property
    def variable_names(self) -> tuple[str, ...]:
        """Its variables as a user would call them: Python's, then R's (`in_r`)."""
        return (*self.saved, *(in_r(name) for name in self.r_saved))

    @property
    def names(self) -> list[str]:
        """What a user would call its contents: variables, then files."""
        return [*self.variable_names, *sorted(self.files)]


def in_r(name: str) -> str:
    """An R variable's name as a user reads it beside Python's: `df (R)`."""
    return f"{name} (R)" if name else R_VARIABLES_NOTE


def names_a_variable(name: str) -> bool:
    """Whether a workspace's note (saved, skipped, failed) names a variable, not a file."""
    return name.isidentifier() or name.endswith(" (R)") or name == R_VARIABLES_NOTE


def pack(workspace: Workspace) -> bytes:
    manifest = {
        "version": 1,
        "created": workspace.created,
        "saved": list(workspace.saved),
        "skipped": dict(workspace.skipped),
        "cells": list(workspace.cells),
        "packages": list(workspace.packages),
        "r_saved": list(workspace.r_saved),
    }
    if workspace.paused is not None:
        manifest["paused"] = dataclasses.asdict(workspace.paused)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, MANIFEST, json.dumps(manifest).encode())
        _add(tar, VARIABLES, workspace.variables)
        if workspace.r_variables:
            _add(tar, R_VARIABLES, workspace.r_variables)
        for path, content in sorted(workspace.files.items()):
            _add(tar, FILES + path, content)
    return buffer.getvalue()


def unpack(data: bytes, max_files: int, max_total_bytes: int) -> Workspace:
    """The workspace in `data`; WorkspaceError when it is not one or breaks a cap."""
    manifest: dict[str, Any] | None = None
    variables = r_variables = b""
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
                elif member.name == R_VARIABLES:
                    r_variables = content
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
        # Only pins: a store may be tampered with, and these reach pip.
        packages=pins(tuple(str(pin) for pin in manifest.get("packages", []))),
        paused=_paused(manifest.get("paused")),
        r_variables=r_variables,
        r_saved=tuple(str(name) for name in manifest.get("r_saved", [])),
    )


def _paused(found: object) -> PausedSandbox | None:
    """The paused-sandbox record of a manifest, read within bounds (None: none, or not one)."""
    if not isinstance(found, dict):
        return None
    try:
        paused = PausedSandbox(
            backend=str(found["backend"])[:40],
            sandbox=str(found["sandbox"])[:200],
            checkpoint=str(found["checkpoint"])[:100],
            key=str(found["key"]),
            paused_at=float(found["paused_at"]),
        )
        bytes.fromhex(paused.key)
    except (KeyError, TypeError, ValueError):
        return None
    return paused if len(paused.key) == 64 else None


def _add(tar: tarfile.TarFile, name: str, content: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mode = 0o644
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(content))


def _plain(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and ".." not in parts and "\x00" not in path
