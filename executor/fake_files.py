"""The fake sandbox's /mnt/data: its files (a dict of path to bytes, which the fake's runs and
archives share) and folders, answering the protocol's file operations (`wire.Fs`, and the
streamed `wire.ReadChunk` and `wire.WriteChunk`) with the runner's answers and the runner's
refusals. It has no links or FIFOs (the fake's code cannot make them)."""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from executor import wire

LIST_LIMIT = 10_000
"""As the runner: the most entries one list returns."""
MAX_UPLOADS = 4
PARTIAL_PREFIX = ".cellmate-partial-"


class FakeTree:
    def __init__(
        self, files: dict[str, bytes], owner: str = "sandbox", max_bytes: int = 2**40
    ) -> None:
        self.files = files
        self.folders: set[str] = set()
        """Folders made on their own; those that hold files exist as well."""
        self.modified: dict[str, float] = {}
        self.owner = owner
        """The owner and group every entry has (the sandbox's user)."""
        self.max_bytes = max_bytes
        """What /mnt/data holds: a write past it fails as on a full disk."""
        self.uploads: dict[str, tuple[str, bytearray]] = {}
        """Files being written in chunks, by upload: their path and bytes so far."""

    def apply(self, request: wire.Fs) -> wire.FsDone:
        """The runner's answer; OSError or ValueError where the runner's answer is an error."""
        # The folders that files put or written so far sit in stay when those files go.
        self.folders = self._all_dirs()
        path = _relative(request.path)
        if request.action == "list":
            if path and not self._is_dir(path):
                raise FileNotFoundError(f"No such folder: '/mnt/data/{path}'")
            depth = request.depth or (0 if request.recursive else 1)
            return wire.FsDone(id=request.id, entries=tuple(self._list(path, depth)))
        if request.action == "info":
            return wire.FsDone(id=request.id, entry=self._entry(path))
        if not path:
            raise ValueError("that is /mnt/data itself")
        if request.action == "make_dir":
            if path in self.files:
                raise FileExistsError(f"[Errno 17] File exists: '/mnt/data/{path}'")
            self.folders.update(_with_parents(path))
        elif request.action == "remove":
            self._remove(path)
        else:
            self._rename(path, _relative(request.to))
        return wire.FsDone(id=request.id, ok=True)

    def _all_dirs(self) -> set[str]:
        found = {parent for name in self.folders for parent in _with_parents(name)}
        for name in self.files:
            found.update(_with_parents(str(PurePosixPath(name).parent)))
        found.discard(".")
        return found

    def _is_dir(self, path: str) -> bool:
        return path in self._all_dirs()

    def _entry(self, path: str) -> wire.Entry:
        if path in self.files:
            stamp = self.modified.setdefault(path, time.time())
            size = len(self.files[path])
            return wire.Entry(path, "file", size, stamp, 0o644, owner=self.owner, group=self.owner)
        if self._is_dir(path):
            stamp = self.modified.setdefault(path, time.time())
            return wire.Entry(path, "dir", 0, stamp, 0o755, owner=self.owner, group=self.owner)
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '/mnt/data/{path}'")

    def _children(self, folder: str) -> list[str]:
        names = set(self.files) | self._all_dirs()
        inside = [n for n in names if str(PurePosixPath(n).parent) == (folder or ".")]
        return sorted(inside, key=lambda n: PurePosixPath(n).name)

    def _list(self, path: str, depth: int) -> list[wire.Entry]:
        found: list[wire.Entry] = []
        pending = [(path, 1)]
        while pending and len(found) < LIST_LIMIT:
            folder, level = pending.pop(0)
            for child in self._children(folder):
                item = self._entry(child)
                found.append(item)
                if item.type == "dir" and (depth == 0 or level < depth):
                    pending.append((child, level + 1))
        return found[:LIST_LIMIT]

    def read(self, request: wire.ReadChunk) -> wire.Chunk:
        """As the runner's read_chunk: bytes of a file from an offset, with its version."""
        try:
            path = self._regular(request.path)
        except (OSError, ValueError) as exc:
            return wire.Chunk(id=request.id, offset=request.offset, error=_problem(exc))
        content = self.files[path]
        data = content[request.offset : request.offset + request.size]
        stamp = self.modified.setdefault(path, time.time())
        return wire.Chunk(
            id=request.id,
            offset=request.offset,
            data=data,
            eof=request.offset + len(data) >= len(content),
            size=len(content),
            version=f"{id(content)}:{stamp}",
        )

    def write(self, request: wire.WriteChunk) -> wire.Written:
        """As the runner's uploads: chunks in order, the file in place with the last one,
        nothing left behind by a failure or an abort."""
        upload = self.uploads.get(request.upload)
        if request.abort:
            self.uploads.pop(request.upload, None)
            return wire.Written(id=request.id, done=True)
        try:
            if upload is None:
                if request.offset != 0:
                    raise ValueError("no such upload in progress (the first chunk is at offset 0)")
                path = _relative(request.path)
                if self._is_dir(path):
                    raise ValueError(f"{request.path!r} is a folder, not a regular file")
                self._parent_is_folder(path)
                while len(self.uploads) >= MAX_UPLOADS:
                    self.uploads.pop(next(iter(self.uploads)))
                upload = self.uploads[request.upload] = (request.path, bytearray())
            if upload[0] != request.path:
                raise ValueError("a chunk of this upload names another path")
            if request.offset != len(upload[1]):
                raise ValueError(
                    f"a chunk at offset {request.offset}, but {len(upload[1])} bytes are written"
                )
            held = sum(len(c) for c in self.files.values()) + sum(
                len(u[1]) for u in self.uploads.values()
            )
            if held + len(request.data) > self.max_bytes:
                raise OSError(28, "No space left on device")
            upload[1].extend(request.data)
            if request.last:
                path = _relative(request.path)
                self.files[path] = bytes(upload[1])
                self.modified[path] = time.time()
                self.uploads.pop(request.upload, None)
                return wire.Written(id=request.id, written=len(upload[1]), done=True)
            return wire.Written(id=request.id, written=len(upload[1]))
        except (OSError, ValueError) as exc:
            self.uploads.pop(request.upload, None)
            written = len(upload[1]) if upload is not None else 0
            return wire.Written(id=request.id, written=written, error=_problem(exc))

    def _regular(self, given: str) -> str:
        path = _relative(given)
        if path in self.files:
            return path
        if path and self._is_dir(path):
            raise ValueError(f"{given!r} is a folder, not a regular file")
        raise FileNotFoundError(f"[Errno 2] No such file or directory: {path.split('/')[-1]!r}")

    def _parent_is_folder(self, path: str) -> None:
        parts = path.split("/")
        for end in range(1, len(parts)):
            if "/".join(parts[:end]) in self.files:
                raise ValueError(f"{path!r} goes through a file, not a folder")

    def _remove(self, path: str) -> None:
        if path in self.files:
            del self.files[path]
            return
        if not self._is_dir(path):
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '/mnt/data/{path}'")
        for name in [n for n in self.files if n.startswith(path + "/")]:
            del self.files[name]
        self.folders = {f for f in self.folders if f != path and not f.startswith(path + "/")}

    def _rename(self, path: str, target: str) -> None:
        if not target:
            raise FileExistsError(". already exists")
        if target in self.files or self._is_dir(target):
            raise FileExistsError(f"{target} already exists")
        if path in self.files:
            self.files[target] = self.files.pop(path)
        elif self._is_dir(path):
            for name in [n for n in self.files if n.startswith(path + "/")]:
                self.files[target + name[len(path) :]] = self.files.pop(name)
            moved = {f for f in self.folders if f == path or f.startswith(path + "/")}
            self.folders = (self.folders - moved) | {target + f[len(path) :] for f in moved}
        else:
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '/mnt/data/{path}'")
        self.folders.update(_with_parents(str(PurePosixPath(target).parent)))
        self.folders.discard(".")


def _problem(exc: BaseException) -> str:
    """As the runner says a failure (a full disk plainly)."""
    if isinstance(exc, OSError) and exc.errno == 28:
        return "OSError: /mnt/data is full (the sandbox's disk limit); nothing was kept"
    return f"{type(exc).__name__}: {exc}"[:300]


def _relative(given: str) -> str:
    """As the runner's data_path: a path under /mnt/data, never out of it."""
    parts = [part for part in given.split("/") if part not in ("", ".")]
    if ".." in parts or "\x00" in given:
        raise ValueError(f"{given!r} leaves /mnt/data")
    return "/".join(parts)


def _with_parents(path: str) -> list[str]:
    parts = PurePosixPath(path).parts
    return ["/".join(parts[: i + 1]) for i in range(len(parts)) if parts[: i + 1] != (".",)]
