"""The result of running code, mirroring Jupyter's outputs (streams, MIME bundles, error)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from executor.session_news import Ended, WorkspaceNews

CHART_MIME = "application/vnd.cellmate.chart+json"
"""A matplotlib figure's data beside its PNG, in E2B's chart shape (the sandbox's
runner/charts.py): type, title, axis labels, units, scales, ticks and elements."""
COLUMNS_MIME = "application/vnd.cellmate.columns+json"
"""A DataFrame's columns beside its HTML, E2B's `{column: [values, ...]}` (no index)."""

ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*(?:\x07|\x1b\\)")


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"
    """The code raised; see `error`."""
    TIMEOUT = "timeout"
    MEMORY = "memory"
    """The sandbox ran out of memory."""
    KILLED = "killed"
    """The kernel or the sandbox died (a signal, a crash, a stop)."""


def clean_text(text: Any) -> str:
    """Text from the sandbox as printable UTF-8: no ANSI codes, no lone surrogates."""
    plain: str = ANSI_ESCAPE.sub("", "" if text is None else str(text))
    return plain.encode("utf-8", "replace").decode("utf-8")


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One entry of a session's /mnt/data."""

    path: str
    """Relative to /mnt/data."""
    type: Literal["file", "dir", "link"]
    size: int
    modified: float
    """Seconds since the epoch."""
    mode: int = 0
    """Permission bits (`0o755`); `permissions` has them as `ls -l` shows them."""
    owner: str = ""
    """The owner's name where the sandbox knows it, else its number as text ("61000")."""
    group: str = ""
    symlink_target: str | None = None
    """A link's target as written in the link (it is listed as a link, never followed)."""

    @property
    def permissions(self) -> str:
        """The permission bits as `ls -l` shows them: "rwxr-xr-x"."""
        return stat.filemode(self.mode & 0o7777)[1:]


@dataclass(frozen=True, slots=True)
class RichResult:
    """A display or execute result: one MIME bundle, as Jupyter sends it."""

    data: Mapping[str, Any]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    is_main_result: bool = False
    """True for the value of the last expression (execute_result), False for display()."""

    @property
    def text(self) -> str:
        return clean_text(_joined(self.data.get("text/plain", "")))

    @property
    def image_types(self) -> list[str]:
        return [mime for mime in self.data if mime.startswith("image/")]

    @property
    def chart(self) -> dict[str, Any] | None:
        """A figure's chart data (E2B's shape, `CHART_MIME`), or None: `type` (line,
        scatter, bar, pie, box_and_whisker, superchart, unknown), `title`, `x_label`,
        `y_label`, `x_unit`, `y_unit`, `x_scale`, `y_scale`, ticks and `elements`; `truncated`
        when points were left out (at most 1,000 per element)."""
        return _json_mapping(self.data.get(CHART_MIME))

    @property
    def columns(self) -> dict[str, list[Any]] | None:
        """A DataFrame's columns (`COLUMNS_MIME`: `{column: [values, ...]}`), or None. At most
        1,000 rows; `metadata[COLUMNS_MIME]` gives the frame's `rows` and `columns`, and says
        `truncated` when some were left out."""
        found = _json_mapping(self.data.get(COLUMNS_MIME))
        if found is None or not all(isinstance(v, list) for v in found.values()):
            return None
        return found

    def image_bytes(self, mime: str) -> bytes | None:
        """The image's bytes: base64 decoded (png, jpeg, ...) or UTF-8 encoded (svg)."""
        value = self.data.get(mime)
        if not isinstance(value, str):
            return None
        if mime == "image/svg+xml":
            return value.encode("utf-8")
        try:
            return base64.b64decode(value, validate=False)
        except (binascii.Error, ValueError):
            return None

    def to_json(self) -> dict[str, Any]:
        return {
            "data": dict(self.data),
            "metadata": dict(self.metadata),
            "is_main_result": self.is_main_result,
        }


def _json_mapping(value: Any) -> dict[str, Any] | None:
    """A JSON object from a bundle (the runner sends it as one; a notebook may hold it as
    text), or None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    return {str(key): item for key, item in value.items()}


@dataclass(frozen=True, slots=True)
class ExecutionError:
    name: str
    value: str
    traceback: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "traceback": list(self.traceback)}


@dataclass(frozen=True, slots=True)
class OutputFile:
    """A regular file created or changed under /mnt/data."""

    path: str
    content: bytes

    @property
    def size(self) -> int:
        return len(self.content)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """Something under /mnt/data that was not returned, and why."""

    path: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class OutputEvent:
    """One piece of output as it happens, for callers that stream (already capped)."""

    kind: str
    """stdout, stderr, result (a display or the last expression's value) or error."""
    text: str = ""
    result: RichResult | None = None
    error: ExecutionError | None = None


@dataclass(frozen=True, slots=True)
class InputAsked:
    """The code waits in `input()` (or, with `password`, `getpass()`) for an answer."""

    prompt: str
    password: bool = False


@dataclass(frozen=True, slots=True)
class InputExchange:
    """One `input()` or `getpass()` of a run, and what became of it."""

    prompt: str
    password: bool
    answered: bool
    answer: str = ""
    """What was answered; always '' for `getpass()`, whose answer is never kept."""

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "password": self.password,
            "answered": self.answered,
            "answer": self.answer,
        }


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    status: Status
    stdout: str = ""
    stderr: str = ""
    results: tuple[RichResult, ...] = ()
    error: ExecutionError | None = None
    message: str = ""
    """Why the run ended, for a person, when it did not end with `ok`; notes otherwise."""
    files: tuple[OutputFile, ...] = ()
    skipped_files: tuple[SkippedFile, ...] = ()
    notebook: Mapping[str, Any] | None = None
    """The executed notebook (nbformat 4 JSON), when the runner could send it."""
    output_truncated: bool = False
    dropped_results: int = 0
    """Rich results (displays, charts) past the per-run cap, not kept; the message says how
    many ("N more results not shown")."""
    duration_ms: int = 0
    startup_ms: int = 0
    runtime: str = "runc"
    workspace: str = ""
    """In session mode, for a person: what became of the conversation's saved workspace
    (`workspace_news`), as the caller phrases it (the executor leaves it empty)."""
    workspace_news: WorkspaceNews | None = None
    """In session mode: what became of the conversation's saved workspace for this run
    (restored, and what not; could not be saved or restored; saved and waiting for
    /restore)."""
    ended: Ended | None = None
    """In session mode: why the conversation's earlier session ended, when this run had to
    start a new one."""
    resumed: bool = False
    """In session mode: the session carried on, with its variables and files, across a
    restart of the process that runs sessions (said once, on its next run)."""
    execution_count: int | None = None
    """The kernel's count for the run's last cell that ran, as Jupyter numbers cells
    (`In [7]`); None when no cell ran."""
    session_restarted: bool = False
    """In session mode: the conversation's earlier session had ended, so its variables and
    files are gone (`ended` says why)."""
    inputs: tuple[InputExchange, ...] = ()
    """The code's `input()` and `getpass()` calls, in order, with what became of each."""
    beside: bool = False
    """In session mode: it ran in a second kernel beside a run that went on (`beside`):
    the session's files, but not its variables."""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "message": self.message,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "results": [r.to_json() for r in self.results],
            "error": self.error.to_json() if self.error else None,
            "files": [f.to_json() for f in self.files],
            "skipped_files": [s.to_json() for s in self.skipped_files],
            "output_truncated": self.output_truncated,
            "dropped_results": self.dropped_results,
            "duration_ms": self.duration_ms,
            "startup_ms": self.startup_ms,
            "runtime": self.runtime,
            "session_restarted": self.session_restarted,
            "execution_count": self.execution_count,
            "workspace": self.workspace,
            "inputs": [i.to_json() for i in self.inputs],
        }


@dataclass(slots=True)
class OutputCollector:
    """Folds nbformat outputs, as the runner streams them, into the parts of a result.

    The runner caps output already; the caps here hold even if sandboxed code bypasses it
    and writes events to the container's stdout itself. Sizes are UTF-8 bytes.
    """

    text_limit: int = 1_000_000
    rich_limit: int = 20_000_000
    rich_count_limit: int = 100
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    results: list[RichResult] = field(default_factory=list)
    error: ExecutionError | None = None
    truncated: bool = False
    dropped: int = 0
    """Rich results past `rich_count_limit`."""
    _text_size: int = 0
    _rich_size: int = 0

    def add(self, output: Mapping[str, Any]) -> OutputEvent | None:
        """Fold one output in; return it as an event, or None if it was empty or over a cap."""
        kind = output.get("output_type")
        if kind == "stream":
            text = clean_text(_joined(output.get("text", "")))
            encoded = text.encode("utf-8")
            room = max(self.text_limit - self._text_size, 0)
            if len(encoded) > room:
                # Cut at a byte count, never inside a character.
                encoded, self.truncated = encoded[:room], True
                text = encoded.decode("utf-8", "ignore")
                encoded = text.encode("utf-8")
            self._text_size += len(encoded)
            if not text:
                return None
            name = "stderr" if output.get("name") == "stderr" else "stdout"
            (self.stderr if name == "stderr" else self.stdout).append(text)
            return OutputEvent(kind=name, text=text)
        if kind in ("display_data", "execute_result"):
            data = output.get("data")
            if isinstance(data, Mapping):
                if len(self.results) >= self.rich_count_limit:
                    self.dropped += 1
                    return None
                size = sum(len(str(value).encode("utf-8", "replace")) for value in data.values())
                if self._rich_size + size > self.rich_limit:
                    self.truncated = True
                    return None
                self._rich_size += size
                self.results.append(
                    RichResult(
                        data={
                            str(k): _joined(v) if isinstance(v, list) else v
                            for k, v in data.items()
                        },
                        metadata=_mapping(output.get("metadata")),
                        is_main_result=kind == "execute_result",
                    )
                )
                return OutputEvent(kind="result", result=self.results[-1])
            return None
        if kind == "error":
            self.error = ExecutionError(
                name=clean_text(output.get("ename", "")),
                value=clean_text(output.get("evalue", "")),
                traceback=tuple(clean_text(line) for line in _lines(output.get("traceback"))),
            )
            return OutputEvent(kind="error", error=self.error)
        return None

    def result(self, status: Status, message: str, **fields: Any) -> ExecutionResult:
        """The collected outputs as a result, with the run's other fields."""
        return ExecutionResult(
            status=status,
            stdout="".join(self.stdout),
            stderr="".join(self.stderr),
            results=tuple(self.results),
            error=self.error,
            message=message,
            **fields,
        )


def _joined(value: Any) -> Any:
    return "".join(str(v) for v in value) if isinstance(value, list) else value


def _lines(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}
