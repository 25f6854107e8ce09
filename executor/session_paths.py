"""Paths in a session's /mnt/data as callers give them: relative, never out of it."""

from __future__ import annotations

from pathlib import PurePosixPath


def safe_relative(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return (
        bool(parts)
        and not PurePosixPath(path).is_absolute()
        and ".." not in parts
        and "\x00" not in path
    )


def normal(path: str) -> str:
    return "/".join(PurePosixPath(path).parts)
