"""How `cellmate exec` shows a result to a person, and saves its images and files."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import TextIO

from bot.terminal import clean, show_name
from bot.text import TERMINAL_MARK, human_size
from executor.models import ExecutionResult, RichResult

IMAGE_SUFFIXES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/svg+xml": ".svg",
    "image/gif": ".gif",
}
# Room for a numbering suffix within the 255 bytes most file systems allow.
MAX_NAME_BYTES = 200
UNSAFE_IN_NAMES = frozenset('/\\:*?"<>|')
UNSHOWN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def save_outputs(result: ExecutionResult, out_dir: Path) -> dict[str, list[Path]]:
    """Write images (by result index) and output files under `out_dir`; return what went where.

    Output files go flat into `out_dir/files`, each under a name from `host_file_name`, made
    unique; nothing is written outside that folder or through a link.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    root = out_dir.resolve()
    saved: dict[str, list[Path]] = {"images": [], "files": []}
    for index, rich in enumerate(result.results, start=1):
        for mime in rich.image_types:
            content = rich.image_bytes(mime)
            if content is None or mime not in IMAGE_SUFFIXES:
                continue
            path = root / f"output-{index}{IMAGE_SUFFIXES[mime]}"
            path.write_bytes(content)
            saved["images"].append(path)
            break
    if result.files:
        (root / "files").mkdir(exist_ok=True)
        folder = (root / "files").resolve()
        taken: set[str] = set()
        for file in result.files:
            target = _free_path(folder, host_file_name(file.path), taken)
            target.write_bytes(file.content)
            saved["files"].append(target)
    if result.notebook is not None:
        notebook = root / "notebook.ipynb"
        notebook.write_text(json.dumps(result.notebook, indent=1), encoding="utf-8")
        saved["notebook"] = [notebook]
    return saved


def host_file_name(path: str) -> str:
    """A plain, visible file name for a path chosen in the sandbox.

    Folders become part of the name (`plots/a.png` is `plots_a.png`); control, format and
    undecodable characters and separators become `_`; a leading dot or dash (a hidden file,
    or a name read as an option) becomes `_`; the length is bounded, keeping the extension.
    """
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".", "..")]
    name = unicodedata.normalize("NFC", "_".join(parts))
    name = "".join(
        "_" if ch in UNSAFE_IN_NAMES or unicodedata.category(ch) in UNSHOWN else ch for ch in name
    ).strip()
    visible = name.lstrip(".-").rstrip(". ")
    name = (f"_{visible}" if name[:1] in (".", "-") else visible) if visible else "file"
    if len(name.encode("utf-8")) <= MAX_NAME_BYTES:
        return name
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem or len(suffix) > 16:
        stem, suffix = name, ""
    ending = f".{suffix}" if suffix else ""
    while len((stem + ending).encode("utf-8")) > MAX_NAME_BYTES:
        stem = stem[:-1]
    return stem.rstrip(". ") + ending


def _free_path(folder: Path, name: str, taken: set[str]) -> Path:
    """`folder / name`, numbered (`name-2.csv`) if this run used it or it is not a plain file.

    Names are compared ignoring case, for folders on file systems that do.
    """
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem.strip("_"):
        stem, suffix = name, ""
    ending = f".{suffix}" if suffix else ""
    candidate, counter = name, 2
    while True:
        path = folder / candidate
        occupied = path.is_symlink() or (path.exists() and not path.is_file())
        if candidate.casefold() not in taken and not occupied:
            break
        candidate = f"{stem}-{counter}{ending}"
        counter += 1
    taken.add(candidate.casefold())
    if path.resolve().parent != folder:
        raise OSError(f"refusing to write {candidate!r} outside {folder}")
    return path


def print_result(
    result: ExecutionResult, stream: TextIO, saved: dict[str, list[Path]] | None = None
) -> None:
    """Show a result for a person; sandboxed code chose much of it, so all of it is cleaned
    for the terminal, and names are shown escaped on one line."""
    saved = saved or {"images": [], "files": []}
    images = iter(saved["images"])
    parts: list[str] = []
    if result.stdout:
        parts.append(_ended(result.stdout))
    if result.stderr:
        parts.append(_section("stderr"))
        parts.append(_ended(result.stderr))
    for index, rich in enumerate(result.results, start=1):
        if rich.image_types:
            where = next(images, None)
            size = _describe_image(rich)
            parts.append(
                f"[chart {index}: {size}"
                + (
                    f" saved to {show_name(str(where))}]\n"
                    if where
                    else "; use --out DIR to save it]\n"
                )
            )
        elif "text/plain" in rich.data:
            parts.append(_ended(("Out: " if rich.is_main_result else "") + rich.text))
        else:
            parts.append(f"[{', '.join(show_name(str(mime)) for mime in rich.data)} output]\n")
    if result.error is not None:
        parts.append(_section("error"))
        parts.append(
            _ended(
                "\n".join(result.error.traceback) or f"{result.error.name}: {result.error.value}"
            )
        )
    if result.files:
        parts.append(_section("files"))
        saved_files = iter(saved["files"])
        for file in result.files:
            where = next(saved_files, None)
            parts.append(
                f"{show_name(file.path)} ({human_size(file.size)})"
                + (f" -> {show_name(str(where))}" if where else "")
                + "\n"
            )
    for skipped in result.skipped_files:
        parts.append(f"not returned: {show_name(skipped.path)}: {show_name(skipped.reason)}\n")
    seconds = result.duration_ms / 1000
    summary = f"{TERMINAL_MARK[result.status]} {result.status.value} in {seconds:.2f} s"
    summary += f" (sandbox ready in {result.startup_ms / 1000:.2f} s, {result.runtime})"
    parts.append(summary + (f": {result.message}" if result.message else "") + "\n")
    stream.write(clean("".join(parts)))


def _ended(text: str) -> str:
    """Output ends its line, so the next section starts on a line of its own."""
    return text if text.endswith("\n") else text + "\n"


def _section(title: str) -> str:
    return f"── {title} ──\n"


def _describe_image(rich: RichResult) -> str:
    mime = rich.image_types[0]
    content = rich.image_bytes(mime) or b""
    return f"{show_name(mime)}, {human_size(len(content))}"
