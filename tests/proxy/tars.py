"""Tar streams as an attacker writes them (raw headers, any type, any name, extended headers),
and an independent check of a rebuilt tar: what the engine would extract from it."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from posixpath import normpath

BLOCK = 512


def member(
    name: str,
    data: bytes = b"",
    *,
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
    mode: int = 0o644,
    uid: int = 0,
    size: int | None = None,
    pax: dict[str, str] | None = None,
    gnu_long: bool = False,
) -> bytes:
    """One member: extended or GNU long-name headers as asked, then the header and data.
    `size` declares a size other than the data's (a lie the reader must catch)."""
    out = b""
    if pax:
        records = b"".join(_pax_record(k, v) for k, v in pax.items())
        out += _header("././@PaxHeader", len(records), tarfile.XHDTYPE) + _padded(records)
    if gnu_long:
        raw = name.encode("utf-8", "surrogateescape") + b"\0"
        out += _header("././@LongLink", len(raw), tarfile.GNUTYPE_LONGNAME) + _padded(raw)
        name = name[:99]
    declared = len(data) if size is None else size
    out += _header(name, declared, kind, link=link, mode=mode, uid=uid) + _padded(data)
    return out


def archive(*members: bytes) -> bytes:
    return b"".join(members) + bytes(2 * BLOCK)


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body)
    while len(str(length).encode()) + len(body) != length:
        length = len(str(length).encode()) + len(body)
    return str(length).encode() + body


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def _header(
    name: str, size: int, kind: bytes, *, link: str = "", mode: int = 0o644, uid: int = 0
) -> bytes:
    block = bytearray(BLOCK)
    raw_name = name.encode("utf-8", "surrogateescape")[:100]
    block[0 : len(raw_name)] = raw_name
    block[100:108] = b"%07o\0" % (mode & 0o7777777)
    block[108:116] = b"%07o\0" % uid
    block[116:124] = b"%07o\0" % uid
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"%011o\0" % 0
    block[148:156] = b" " * 8
    block[156:157] = kind
    raw_link = link.encode()[:100]
    block[157 : 157 + len(raw_link)] = raw_link
    block[257:265] = b"ustar\x0000"
    checksum = sum(block)
    block[148:156] = b"%06o\0 " % checksum
    return bytes(block)


@dataclass(frozen=True)
class Entry:
    info: tarfile.TarInfo
    data: bytes

    @property
    def name(self) -> str:
        return self.info.name


def extracted(rebuilt: bytes, whole: bool = True) -> list[Entry]:
    """The members of a rebuilt tar, each checked as the engine would meet it; `whole=False`
    for what went to the engine before a refusal, which may stop anywhere (every member
    header that arrived is still checked)."""
    assert not rebuilt[:6].startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd"))
    folders = {""}
    names: set[str] = set()
    found: list[Entry] = []
    if not rebuilt and not whole:
        return found
    try:
        with tarfile.open(fileobj=io.BytesIO(rebuilt), mode="r|") as tar:
            for info in tar:
                assert info.type in (tarfile.REGTYPE, tarfile.DIRTYPE), info.type
                assert not info.name.startswith("/")
                assert normpath(info.name) == info.name
                assert ".." not in info.name.split("/")
                assert info.name.rpartition("/")[0] in folders
                assert info.name not in names
                assert info.mode <= 0o777
                assert not info.linkname
                assert set(info.pax_headers) <= {"path"}
                names.add(info.name)
                data = b""
                if info.isdir():
                    folders.add(info.name)
                else:
                    file = tar.extractfile(info)
                    assert file is not None
                    data = file.read()
                    assert len(data) == info.size
                found.append(Entry(info, data))
    except (tarfile.ReadError, OSError):
        if whole:
            raise
    return found
