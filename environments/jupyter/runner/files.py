"""The runner's view of /mnt/data: what a run changed, and the protocol's file operations
(`Fs`), done as the sandbox's user, with links never followed."""

from __future__ import annotations

import functools
import grp
import os
import pwd
import shutil
import stat as stat_kind
from pathlib import Path
from typing import Literal

from executor import wire

DATA_DIR = Path("/mnt/data")
SNAPSHOT_LIMIT = 20_000
FS_LIST_LIMIT = 10_000


def snapshot() -> dict[str, tuple[int, int]]:
    """Size and modification time of every regular file under /mnt/data (capped)."""
    found: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(DATA_DIR):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            try:
                stat = path.lstat()
            except OSError:
                continue
            found[str(path.relative_to(DATA_DIR))] = (stat.st_size, stat.st_mtime_ns)
            if len(found) >= SNAPSHOT_LIMIT:
                return found
    return found


def files_op(request: wire.Fs) -> wire.FsDone:
    """A file operation in /mnt/data, as the sandbox's user (what it reaches, the user's
    code reaches too): list, info, make_dir, remove, rename. Links are never followed."""
    try:
        path = data_path(request.path)
        if request.action == "list" and path.is_symlink():
            raise ValueError(f"{request.path!r} is a link, not a folder (links are not followed)")
        if request.action == "list":
            depth = request.depth or (0 if request.recursive else 1)
            return wire.FsDone(id=request.id, entries=tuple(list_entries(path, depth)))
        if request.action == "info":
            return wire.FsDone(id=request.id, entry=entry(path))
        if path == DATA_DIR:
            raise ValueError("that is /mnt/data itself")
        if request.action == "make_dir":
            path.mkdir(parents=True, exist_ok=True)
        elif request.action == "remove":
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        else:
            target = data_path(request.to)
            if target == DATA_DIR or target.exists() or target.is_symlink():
                raise FileExistsError(f"{target.relative_to(DATA_DIR)} already exists")
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
        return wire.FsDone(id=request.id, ok=True)
    except (OSError, ValueError) as exc:
        return wire.FsDone(id=request.id, error=f"{type(exc).__name__}: {exc}"[:300])


def data_path(relative: str) -> Path:
    """A path under /mnt/data whose parents are real folders there (no link on the way)."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts or "\x00" in relative:
        raise ValueError(f"{relative!r} leaves /mnt/data")
    path = DATA_DIR
    for part in parts[:-1]:
        path = path / part
        if path.is_symlink():
            raise ValueError(f"{relative!r} goes through a link")
    return path / parts[-1] if parts else DATA_DIR


def entry(path: Path) -> wire.Entry:
    """What `path` is, from its own lstat: a link is a link (with its target), never what
    it points to."""
    stat = path.lstat()
    kind: Literal["file", "dir", "link"] = (
        "link"
        if stat_kind.S_ISLNK(stat.st_mode)
        else "dir"
        if stat_kind.S_ISDIR(stat.st_mode)
        else "file"
    )
    return wire.Entry(
        path=str(path.relative_to(DATA_DIR)),
        type=kind,
        size=stat.st_size if kind == "file" else 0,
        modified=stat.st_mtime,
        mode=stat_kind.S_IMODE(stat.st_mode),
        owner=user_name(stat.st_uid),
        group=group_name(stat.st_gid),
        target=str(path.readlink())[: wire.MAX_PATH_CHARS] if kind == "link" else None,
    )


@functools.cache
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@functools.cache
def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def list_entries(path: Path, depth: int = 0) -> list[wire.Entry]:
    """Entries under `path`, folder by folder, `depth` levels down (0: all of them)."""
    found: list[wire.Entry] = []
    pending = [(path, 1)]
    while pending and len(found) < FS_LIST_LIMIT:
        folder, level = pending.pop(0)
        for child in sorted(folder.iterdir()):
            item = entry(child)
            found.append(item)
            if item.type == "dir" and (depth == 0 or level < depth):
                pending.append((child, level + 1))
    return found[:FS_LIST_LIMIT]


def read_at_most(path: Path, size: int) -> bytes:
    with path.open("rb") as file:
        return file.read(size)
