"""Tar streams put into a sandbox, rebuilt: the engine extracts them as root, so it gets only
what the executor ever sends.

The client's tar is read member by member (Python's `tarfile`, stream mode: nothing is held
but the member being copied) and a new tar is written from what is allowed of each:

- regular files and folders only: no symbolic or hard links, devices, FIFOs, sparse or
  contiguous files, or types the reader does not know;
- names made plain (no `.` or empty parts) and strictly under the target: no absolute name,
  no `..`, no control characters, and every member's parent a folder earlier in the same tar,
  so the engine never creates a folder of its own nor follows one the sandbox made;
- permissions masked to 0o777 (no set-user-id, set-group-id or sticky bit), owned by the
  sandbox user, with the engine's name lookups left empty;
- the sizes of the members, each and together, and their number within the caps;
- no extended headers of the client's: the writer adds one only where a name needs it, and
  one to open the stream, so that its first bytes are never a compressed stream's magic
  (the engine would decompress what follows).

Compressed uploads are refused: the executor sends plain tars, and a decompressed size is
not known before it is written.
"""

from __future__ import annotations

import tarfile
import unicodedata
from dataclasses import dataclass
from typing import IO, Protocol, cast

from dockerproxy.errors import RequestRefused

MAX_NAME_BYTES = 4095
MAX_PART_BYTES = 255
MAX_MTIME = 8**11 - 1
COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}


class Source(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True, slots=True)
class TarCaps:
    uid: int
    gid: int
    max_bytes: int
    """The members' sizes together."""
    max_member_bytes: int
    max_members: int


@dataclass(frozen=True, slots=True)
class Rebuilt:
    members: int
    bytes: int


def rebuild(source: Source, sink: Sink, caps: TarCaps) -> Rebuilt:
    """Reads a tar from `source`, writes the rebuilt tar to `sink`; RequestRefused on the first
    member that is not allowed (what was written before it is safe on its own)."""
    opening = _read_up_to(source, 512)
    for magic, kind in COMPRESSED.items():
        if opening.startswith(magic) and not _is_header(opening):
            raise RequestRefused(f"the upload is {kind}-compressed: send a plain tar")
    if len(opening) == 512 and not opening.strip(b"\0"):
        # An empty archive (only its end blocks): tarfile reads none, the engine gets one.
        tarfile.open(fileobj=cast(IO[bytes], sink), mode="w|").close()
        return Rebuilt(0, 0)
    stream = cast(IO[bytes], _Prefixed(opening, source))
    folders: set[str] = set()
    seen: set[str] = set()
    total = 0
    try:
        with (
            tarfile.open(fileobj=stream, mode="r|") as given,
            tarfile.open(
                fileobj=cast(IO[bytes], sink), mode="w|", format=tarfile.PAX_FORMAT
            ) as built,
        ):
            for member in given:
                name = _name(member)
                if name == "":
                    if not member.isdir():
                        raise RequestRefused("a tar member without a name is not a folder")
                    continue  # the target itself: its owner and mode stay the sandbox's
                if name in seen:
                    raise RequestRefused(f"the tar member {name!r} appears twice")
                seen.add(name)
                if len(seen) > caps.max_members:
                    raise RequestRefused(
                        f"an upload may hold at most {caps.max_members} files and folders"
                    )
                parent = name.rpartition("/")[0]
                if parent and parent not in folders:
                    raise RequestRefused(
                        f"the tar member {name!r} comes before its folder {parent!r} "
                        "(every folder must be in the tar before what it holds)"
                    )
                out = tarfile.TarInfo(name)
                out.mode = member.mode & 0o777
                out.uid, out.gid = caps.uid, caps.gid
                out.uname = out.gname = ""
                out.mtime = min(max(int(member.mtime), 0), MAX_MTIME)
                if len(seen) == 1:
                    # The first header is an extended one whatever the name, so the stream
                    # never starts with bytes the engine takes for a compressed stream's.
                    out.pax_headers = {"path": name}
                if member.type == tarfile.DIRTYPE:
                    out.type = tarfile.DIRTYPE
                    folders.add(name)
                    built.addfile(out)
                    continue
                if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    raise RequestRefused(
                        f"the tar member {name!r} is {_kind(member)}: only files and folders"
                    )
                if member.size > caps.max_member_bytes:
                    raise RequestRefused(
                        f"the file {name!r} is {member.size} bytes; "
                        f"a file may be at most {caps.max_member_bytes}"
                    )
                total += member.size
                if total > caps.max_bytes:
                    raise RequestRefused(
                        f"the upload's files total more than {caps.max_bytes} bytes"
                    )
                out.type = tarfile.REGTYPE
                out.size = member.size
                built.addfile(out, given.extractfile(member))
    except (tarfile.TarError, EOFError) as exc:
        raise RequestRefused(f"the upload is not a tar the proxy reads: {exc}") from None
    except OSError as exc:
        # tarfile reports a stream that ends inside a member as an OSError.
        if "unexpected end of data" not in str(exc):
            raise
        raise RequestRefused("the upload ended inside a tar member") from None
    return Rebuilt(len(seen), total)


def _name(member: tarfile.TarInfo) -> str:
    """The member's name made plain, "" for the target itself; RequestRefused when it could reach
    outside the target or is not a name a file may have."""
    name = member.name
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestRefused(f"the tar member name {name!r} is not UTF-8") from None
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        raise RequestRefused(f"the tar member name {name!r} has control characters")
    if name.startswith("/"):
        raise RequestRefused(f"the tar member name {name!r} is absolute")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise RequestRefused(f"the tar member name {name!r} goes up a folder (..)")
    if len(encoded) > MAX_NAME_BYTES or any(len(p.encode()) > MAX_PART_BYTES for p in parts):
        raise RequestRefused(f"the tar member name {name[:60]!r}... is too long")
    return "/".join(parts)


def _kind(member: tarfile.TarInfo) -> str:
    kinds = {
        tarfile.SYMTYPE: "a symbolic link",
        tarfile.LNKTYPE: "a hard link",
        tarfile.CHRTYPE: "a character device",
        tarfile.BLKTYPE: "a block device",
        tarfile.FIFOTYPE: "a FIFO",
        tarfile.CONTTYPE: "a contiguous file",
        tarfile.GNUTYPE_SPARSE: "a sparse file",
    }
    return kinds.get(member.type, f"of type {member.type!r}")


def _is_header(block: bytes) -> bool:
    """A tar header (a first file may be named like a compressed stream's magic)."""
    try:
        tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def _read_up_to(source: Source, size: int) -> bytes:
    data = b""
    while len(data) < size and (chunk := source.read(size - len(data))):
        data += chunk
    return data


class _Prefixed:
    """`source` with bytes already read from it put back in front."""

    def __init__(self, prefix: bytes, source: Source) -> None:
        self._prefix = prefix
        self._source = source

    def read(self, size: int = -1) -> bytes:
        if self._prefix:
            if size < 0 or size >= len(self._prefix):
                data, self._prefix = self._prefix, b""
                return data
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return self._source.read(size)
