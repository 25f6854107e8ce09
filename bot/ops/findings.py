"""One result of `cellmate doctor`: what was checked, whether it is fine, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True
