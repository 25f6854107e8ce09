"""Files into and out of a sandbox as tar streams, refusing anything but plain files.

Everything read back from a sandbox was written by untrusted code, so nothing here ever
touches the host's file system: members are read into memory, within caps, and only
regular files with relative, `..`-free paths come back.
"""

from __future__ import annotations

import io
import tarfile
import time
import unicodedata
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from executor.errors import InvalidInput
from executor.models import OutputFile, SkippedFile

SANDBOX_UID = 61000
SANDBOX_GID = 61000
MAX_NAME_LENGTH = 255


def validate_input_name(name: str) -> str:
    """Return the name if it is a plain file name fit for /mnt/data, else raise InvalidInput."""
    if not name or name in (".", ".."):
        raise InvalidInput(f"input file name {name!r} is empty or a directory reference")
    if "/" in name or "\\" in name:
        raise InvalidInput(
            f"input file name {name!r} contains a path separator: give a plain file name, "
            "files are placed directly in /mnt/data"
        )
    if ".." in PurePosixPath(name).parts:
        raise InvalidInput(f"input file name {name!r} refers to a parent directory")
    if any(unicodedata.category(ch).startswith("C") for ch in name):
        raise InvalidInput(f"input file name {name!r} contains control characters")
    if len(name.encode("utf-8")) > MAX_NAME_LENGTH:
        raise InvalidInput(
            f"input file name {name[:40]!r}... is longer than {MAX_NAME_LENGTH} bytes"
        )
    return name


def build_input_tar(
    files: Mapping[str, bytes],
    max_files: int,
    max_total_bytes: int,
    uid: int = SANDBOX_UID,
    gid: int = SANDBOX_GID,
    folders: bool = False,
) -> bytes:
    """A tar of plain files owned by the sandbox user, after checking names, count and size;
    with `folders`, names may have folders (`in/a.csv`), each part checked the same way."""
    if len(files) > max_files:
        raise InvalidInput(f"{len(files)} input files given; at most {max_files} are allowed")
    total = sum(len(content) for content in files.values())
    if total > max_total_bytes:
        raise InvalidInput(
            f"input files total {total / 1e6:.1f} MB; "
            f"at most {max_total_bytes / 1e6:.0f} MB are allowed"
        )
    if folders:
        return build_workspace_tar(files, uid, gid)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files.items():
            _add_file(tar, validate_input_name(name), content, uid, gid)
    return buffer.getvalue()


def _add_file(tar: tarfile.TarFile, name: str, content: bytes, uid: int, gid: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mode = 0o644
    info.uid, info.gid = uid, gid
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(content))


def build_workspace_tar(
    files: Mapping[str, bytes], uid: int = SANDBOX_UID, gid: int = SANDBOX_GID
) -> bytes:
    """A tar of a saved workspace's files, in their folders under /mnt/data: every part of
    every path is checked as an input file name is (the caller has capped count and size)."""
    buffer = io.BytesIO()
    folders: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in sorted(files.items()):
            parts = [validate_input_name(part) for part in path.split("/")]
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    info.uid, info.gid = uid, gid
                    tar.addfile(info)
            _add_file(tar, "/".join(parts), content, uid, gid)
    return buffer.getvalue()


@dataclass(slots=True)
class OutputCaps:
    max_files: int
    max_file_bytes: int
    max_total_bytes: int
    max_depth: int


@dataclass(slots=True)
class ExtractedFiles:
    files: list[OutputFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    not_listed: int = 0
    """Refused entries beyond what is worth listing one by one."""
    over_count: int = 0
    """Regular files beyond the count cap (a run that wrote 10,000 files)."""


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, as the Docker SDK streams archives."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def read_output_tar(
    stream: io.RawIOBase | io.BufferedIOBase,
    caps: OutputCaps,
    unchanged: Mapping[str, bytes] | None = None,
    wanted: Collection[str] | None = None,
) -> ExtractedFiles:
    """Read an archive of /mnt/data (as `get_archive` returns it) into memory, within caps.

    `unchanged` maps input names to the bytes that went in; files still equal to them are
    not outputs. `wanted`, when given, names the only paths (relative to /mnt/data) to read;
    the rest of the archive is passed over unread. The first path component (the archived
    folder's own name) is dropped.
    """
    unchanged = unchanged or {}
    found = ExtractedFiles()
    total = 0
    max_listed = caps.max_files * 2
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            parts = parts[1:]
            if not parts:
                continue
            path = "/".join(parts)
            if wanted is not None and path not in wanted:
                continue
            reason = _refusal(member, parts, caps)
            if reason == "":
                continue
            if reason is None and len(found.files) >= caps.max_files:
                found.over_count += 1
                continue
            if reason is None and member.size > caps.max_file_bytes:
                reason = f"larger than {caps.max_file_bytes // 1_000_000} MB"
            if reason is None and total + member.size > caps.max_total_bytes:
                reason = f"output files together exceed {caps.max_total_bytes // 1_000_000} MB"
            if reason is not None:
                if len(found.skipped) < max_listed:
                    found.skipped.append(SkippedFile(path=path, reason=reason))
                else:
                    found.not_listed += 1
                continue
            extracted = tar.extractfile(member)
            content = extracted.read() if extracted is not None else b""
            if unchanged.get(path) == content:
                continue
            total += len(content)
            found.files.append(OutputFile(path=path, content=content))
    return found


def _refusal(member: tarfile.TarInfo, parts: tuple[str, ...], caps: OutputCaps) -> str | None:
    """Why a member is not returned; "" for members that are silently passed over (folders)."""
    if member.isdir():
        return ""
    if PurePosixPath(member.name).is_absolute() or ".." in parts:
        return "path leaves /mnt/data"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname!r}); links are never followed"
    if member.isfifo():
        return "a named pipe (FIFO), not a regular file"
    if member.ischr() or member.isblk():
        return "a device, not a regular file"
    if not member.isreg():
        return "not a regular file"
    if len(parts) > caps.max_depth:
        return f"nested deeper than {caps.max_depth} folders"
    return None
