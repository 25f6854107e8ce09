"""The fake sandbox's /mnt/data: its files (a dict of path to bytes, which the fake's runs and
archives share) and folders, answering the protocol's file operations (`wire.Fs`) with the
runner's answers and the runner's refusals."""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from executor import wire

LIST_LIMIT = 10_000
"""As the runner: the most entries one list returns."""


class FakeTree:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.folders: set[str] = set()
        """Folders made on their own; those that hold files exist as well."""
        self.modified: dict[str, float] = {}

    def apply(self, request: wire.Fs) -> wire.FsDone:
        """The runner's answer; OSError or ValueError where the runner's answer is an error."""
        # The folders that files put or written so far sit in stay when those files go.
        self.folders = self._all_dirs()
        path = _relative(request.path)
        if request.action == "list":
            if path and not self._is_dir(path):
                raise FileNotFoundError(f"No such folder: '/mnt/data/{path}'")
            return wire.FsDone(id=request.id, entries=tuple(self._list(path, request.recursive)))
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
            return wire.Entry(path=path, type="file", size=len(self.files[path]), modified=stamp)
        if self._is_dir(path):
            stamp = self.modified.setdefault(path, time.time())
            return wire.Entry(path=path, type="dir", modified=stamp)
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '/mnt/data/{path}'")

    def _children(self, folder: str) -> list[str]:
        names = set(self.files) | self._all_dirs()
        inside = [n for n in names if str(PurePosixPath(n).parent) == (folder or ".")]
        return sorted(inside, key=lambda n: PurePosixPath(n).name)

    def _list(self, path: str, recursive: bool) -> list[wire.Entry]:
        found: list[wire.Entry] = []
        pending = [path]
        while pending and len(found) < LIST_LIMIT:
            folder = pending.pop(0)
            for child in self._children(folder):
                item = self._entry(child)
                found.append(item)
                if recursive and item.type == "dir":
                    pending.append(child)
        return found[:LIST_LIMIT]

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


def _relative(given: str) -> str:
    """As the runner's data_path: a path under /mnt/data, never out of it."""
    parts = [part for part in given.split("/") if part not in ("", ".")]
    if ".." in parts or "\x00" in given:
        raise ValueError(f"{given!r} leaves /mnt/data")
    return "/".join(parts)


def _with_parents(path: str) -> list[str]:
    parts = PurePosixPath(path).parts
    return ["/".join(parts[: i + 1]) for i in range(len(parts)) if parts[: i + 1] != (".",)]
