"""Content types, and which of them a browser may show inline.

Anything that can run script when opened from a link (HTML, SVG, XML, PDF, ...) is served
as a download; only types on the allowlist are shown inline.
"""

from __future__ import annotations

import mimetypes

INLINE_SAFE = frozenset(
    {
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "text/plain",
        "text/csv",
        "application/json",
    }
)
CHAT_EMBEDDABLE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
EXTRA_TYPES = {
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".md": "text/markdown",
    ".parquet": "application/vnd.apache.parquet",
    ".ipynb": "application/x-ipynb+json",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".webp": "image/webp",
}


def guess_type(name: str) -> str:
    suffix = "." + name.rpartition(".")[2].lower() if "." in name else ""
    return (
        EXTRA_TYPES.get(suffix)
        or mimetypes.guess_type(f"x{suffix}")[0]
        or "application/octet-stream"
    )


def served_type(content_type: str) -> str:
    """The Content-Type to send: text gets an explicit charset, so nothing is sniffed."""
    base = content_type.split(";")[0].strip().lower()
    return (
        f"{base}; charset=utf-8" if base.startswith("text/") or base == "application/json" else base
    )


def disposition(content_type: str, filename: str) -> str:
    """`inline` for allowlisted types, `attachment` (a download) for everything else."""
    base = content_type.split(";")[0].strip().lower()
    kind = "inline" if base in INLINE_SAFE else "attachment"
    return f'{kind}; filename="{filename}"'
