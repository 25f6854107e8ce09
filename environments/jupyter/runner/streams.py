"""Files in /mnt/data read and written in chunks (`ReadChunk`, `WriteChunk`), so a file
larger than one line of the protocol moves in many, and neither side holds it whole.

Every path is reached folder by folder from /mnt/data: each name is looked at without
following it (a link, or anything but a folder, on the way is refused), opened with
O_NOFOLLOW from the folder before it, and the opened descriptor must be what was looked
at, so a link put there meanwhile is refused too. A file read must be a regular file
before it is opened (a FIFO is never opened, so it cannot hang the runner), as `Fs` and
the archives the host reads refuse links, FIFOs and devices.

A write goes into a hidden partial file beside its target and is renamed into place by
its last chunk; any failure (a full disk, the file size limit, a bad chunk) removes the
partial file, so no half-written file is left behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass

from executor import wire
from runner.files import DATA_DIR

PARTIAL_PREFIX = ".cellmate-partial-"
"""A partial upload's name, beside its target (the upload's name follows)."""
MAX_UPLOADS = 4
"""Uploads open at once; a fifth removes the oldest (its host is gone, or gave up)."""
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def read_chunk(request: wire.ReadChunk) -> wire.Chunk:
    """Up to `size` bytes of a regular file from `offset`, with its size and version."""
    try:
        folder, name = open_parent(request.path, create=False)
        try:
            fd = open_regular(folder, name, request.path)
        finally:
            os.close(folder)
        try:
            found = os.fstat(fd)
            data = os.pread(fd, request.size, request.offset)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        return wire.Chunk(id=request.id, offset=request.offset, error=describe(exc))
    return wire.Chunk(
        id=request.id,
        offset=request.offset,
        data=data,
        eof=request.offset + len(data) >= found.st_size,
        size=found.st_size,
        version=f"{found.st_dev}:{found.st_ino}:{found.st_mtime_ns}",
    )


@dataclass(slots=True)
class Upload:
    path: str
    folder: int
    """The target's folder, opened once: the upload stays there whatever moves meanwhile."""
    name: str
    partial: str
    fd: int
    written: int = 0


class Uploads:
    """The uploads in progress, by the host's name for each."""

    def __init__(self) -> None:
        self.open: dict[str, Upload] = {}

    def write(self, request: wire.WriteChunk) -> wire.Written:
        upload = self.open.get(request.upload)
        if request.abort:
            if upload is not None:
                self.drop(request.upload)
            return wire.Written(id=request.id, done=True)
        try:
            if upload is None:
                if request.offset != 0:
                    raise ValueError("no such upload in progress (the first chunk is at offset 0)")
                upload = self.start(request)
            if upload.path != request.path:
                raise ValueError("a chunk of this upload names another path")
            if request.offset != upload.written:
                raise ValueError(
                    f"a chunk at offset {request.offset}, but {upload.written} bytes are written"
                )
            write_all(upload.fd, request.data)
            upload.written += len(request.data)
            if request.last:
                self.finish(request.upload, upload)
                return wire.Written(id=request.id, written=upload.written, done=True)
            return wire.Written(id=request.id, written=upload.written)
        except (OSError, ValueError) as exc:
            self.drop(request.upload)
            written = upload.written if upload is not None else 0
            return wire.Written(id=request.id, written=written, error=describe(exc))

    def start(self, request: wire.WriteChunk) -> Upload:
        while len(self.open) >= MAX_UPLOADS:
            self.drop(next(iter(self.open)))
        folder, name = open_parent(request.path, create=True)
        try:
            refuse_other_than_file(folder, name, request.path)
            partial = PARTIAL_PREFIX + request.upload
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial, dir_fd=folder)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(partial, flags, 0o644, dir_fd=folder)
        except BaseException:
            os.close(folder)
            raise
        upload = Upload(path=request.path, folder=folder, name=name, partial=partial, fd=fd)
        self.open[request.upload] = upload
        return upload

    def finish(self, key: str, upload: Upload) -> None:
        refuse_other_than_file(upload.folder, upload.name, upload.path)
        os.rename(upload.partial, upload.name, src_dir_fd=upload.folder, dst_dir_fd=upload.folder)
        self.open.pop(key, None)
        os.close(upload.fd)
        os.close(upload.folder)

    def drop(self, key: str) -> None:
        """End an upload and remove what it wrote."""
        upload = self.open.pop(key, None)
        if upload is None:
            return
        with contextlib.suppress(OSError):
            os.close(upload.fd)
        with contextlib.suppress(OSError):
            os.unlink(upload.partial, dir_fd=upload.folder)
        with contextlib.suppress(OSError):
            os.close(upload.folder)


def open_parent(relative: str, create: bool) -> tuple[int, str]:
    """The folder that holds `relative` (a descriptor, reached step by step from /mnt/data
    without following a link; missing folders made when `create`), and the last name."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or "\x00" in relative or relative.startswith("/"):
        raise ValueError(f"{relative!r} leaves /mnt/data")
    folder = os.open(DATA_DIR, FOLDER_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                found = os.stat(part, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, dir_fd=folder)
                found = os.stat(part, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISLNK(found.st_mode):
                raise ValueError(f"{relative!r} goes through a link")
            if not stat.S_ISDIR(found.st_mode):
                raise ValueError(f"{relative!r} goes through {kind_name(found.st_mode)}")
            inner = opened_as(os.open(part, FOLDER_FLAGS, dir_fd=folder), found, relative)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder, parts[-1]


def open_regular(folder: int, name: str, relative: str) -> int:
    """`name` in `folder` opened for reading: a regular file, never a link, FIFO or device
    (none of those is even opened)."""
    found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if not stat.S_ISREG(found.st_mode):
        raise ValueError(not_regular(relative, found.st_mode))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return opened_as(os.open(name, flags, dir_fd=folder), found, relative)


def opened_as(fd: int, found: os.stat_result, relative: str) -> int:
    """`fd`, if it is what `found` (its name's lstat) was: O_NOFOLLOW alone is not enough,
    since gVisor follows a link to a folder with O_DIRECTORY, and a name can be swapped
    for a link between the look and the open."""
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        raise ValueError(f"{relative!r} changed while it was opened (a link put in its place?)")
    return fd


def refuse_other_than_file(folder: int, name: str, relative: str) -> None:
    """Nothing but a regular file (or nothing) may be replaced by an upload."""
    try:
        kind = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(kind):
        raise ValueError(not_regular(relative, kind))


def not_regular(relative: str, mode: int) -> str:
    found = f"{relative!r} is {kind_name(mode)}, not a regular file"
    return found + " (links are not followed)" if stat.S_ISLNK(mode) else found


def kind_name(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file, not a folder"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a file"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def describe(exc: BaseException) -> str:
    """A failure as the host shows it; a full disk and the file size limit said plainly."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "OSError: /mnt/data is full (the sandbox's disk limit); nothing was kept"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return "OSError: the file is larger than the sandbox's file size limit; nothing was kept"
    return f"{type(exc).__name__}: {exc}"[:300]
