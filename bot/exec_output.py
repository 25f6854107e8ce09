"""How `cellmate exec` shows a result to a person, and saves its images and files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from bot.platforms.markup import human_size
from executor.models import ExecutionResult, RichResult, Status

IMAGE_SUFFIXES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/svg+xml": ".svg",
    "image/gif": ".gif",
}
STATUS_MARK = {
    Status.OK: "✓",
    Status.ERROR: "✗",
    Status.TIMEOUT: "⏱",
    Status.MEMORY: "✗",
    Status.KILLED: "✗",
}


def save_outputs(result: ExecutionResult, out_dir: Path) -> dict[str, list[Path]]:
    """Write images (by result index) and output files under `out_dir`; return what went where."""
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
    for file in result.files:
        target = (root / "files" / file.path).resolve()
        # Paths were checked on the way out of the sandbox; this guards the host once more.
        if not target.is_relative_to(root / "files"):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.content)
        saved["files"].append(target)
    if result.notebook is not None:
        notebook = root / "notebook.ipynb"
        notebook.write_text(json.dumps(result.notebook, indent=1), encoding="utf-8")
        saved["notebook"] = [notebook]
    return saved


def print_result(
    result: ExecutionResult, stream: TextIO, saved: dict[str, list[Path]] | None = None
) -> None:
    saved = saved or {"images": [], "files": []}
    images = iter(saved["images"])
    if result.stdout:
        stream.write(result.stdout if result.stdout.endswith("\n") else result.stdout + "\n")
    if result.stderr:
        _section(stream, "stderr")
        stream.write(result.stderr if result.stderr.endswith("\n") else result.stderr + "\n")
    for index, rich in enumerate(result.results, start=1):
        if rich.image_types:
            where = next(images, None)
            size = _describe_image(rich)
            stream.write(
                f"[chart {index}: {size}"
                + (f" saved to {where}]\n" if where else "; use --out DIR to save it]\n")
            )
        elif "text/plain" in rich.data:
            stream.write(("Out: " if rich.is_main_result else "") + rich.text + "\n")
        else:
            stream.write(f"[{', '.join(rich.data)} output]\n")
    if result.error is not None:
        _section(stream, "error")
        stream.write(
            "\n".join(result.error.traceback) or f"{result.error.name}: {result.error.value}"
        )
        stream.write("\n")
    if result.files:
        _section(stream, "files")
        saved_files = iter(saved["files"])
        for file in result.files:
            where = next(saved_files, None)
            stream.write(
                f"{file.path} ({human_size(file.size)})" + (f" -> {where}" if where else "") + "\n"
            )
    for skipped in result.skipped_files:
        stream.write(f"not returned: {skipped.path}: {skipped.reason}\n")
    seconds = result.duration_ms / 1000
    summary = f"{STATUS_MARK[result.status]} {result.status.value} in {seconds:.2f} s"
    summary += f" (sandbox ready in {result.startup_ms / 1000:.2f} s, {result.runtime})"
    stream.write(summary + (f": {result.message}" if result.message else "") + "\n")


def _section(stream: TextIO, title: str) -> None:
    stream.write(f"── {title} ──\n")


def _describe_image(rich: RichResult) -> str:
    mime = rich.image_types[0]
    content = rich.image_bytes(mime) or b""
    return f"{mime}, {human_size(len(content))}"
