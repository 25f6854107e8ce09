"""E2B's execution model (Execution, Result, Logs, ExecutionError, Context, OutputMessage)
and the mapping from Cellmate's results: a result's mime bundle becomes a `Result`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.e2b.charts import Chart, chart_from_dict

CHART_MIME = "application/vnd.cellmate.chart+json"
"""A figure's data in E2B's chart JSON shape."""
COLUMNS_MIME = "application/vnd.cellmate.columns+json"
"""A DataFrame as columns (`{"a": [1, 2, 3]}`), E2B's `data` form."""
TABLE_MIME = "application/vnd.dataresource+json"
"""A DataFrame's Table Schema (fields and rows), which Cellmate sends beside its HTML."""

FORMATS = {
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
"""Mime types that have a field of their own, in the order `formats()` lists them."""
CONSUMED = {"text/plain", *FORMATS, CHART_MIME, COLUMNS_MIME, TABLE_MIME}
"""Mime types a `Result` field stands for; any other goes to `extra`."""


class MIMEType(str):
    pass


@dataclass
class OutputMessage:
    line: str
    timestamp: int = field(default_factory=lambda: time.time_ns() // 1000)
    error: bool = False

    def __str__(self) -> str:
        return self.line


@dataclass
class ExecutionError:
    name: str
    value: str
    traceback: str

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "value": self.value, "traceback": self.traceback})


def columns_from_table(table: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A Table Schema resource (`schema.fields`, `data` rows) as columns, without the index
    fields the schema names as its primary key."""
    schema = table.get("schema") or {}
    index = schema.get("primaryKey") or []
    index = [index] if isinstance(index, str) else list(index)
    names = [str(f.get("name")) for f in schema.get("fields") or [] if f.get("name") not in index]
    rows = table.get("data") or []
    return {name: [row.get(name) for row in rows] for name in names}


class Result:
    """One displayed value or the cell's value, with one field per format."""

    def __init__(self, bundle: Mapping[str, Any], is_main_result: bool = False) -> None:
        self.raw: dict[str, Any] = dict(bundle)
        self.is_main_result = is_main_result
        self.text: str | None = _text(bundle.get("text/plain"))
        self.html: str | None = _text(bundle.get("text/html"))
        self.markdown: str | None = _text(bundle.get("text/markdown"))
        self.svg: str | None = _text(bundle.get("image/svg+xml"))
        self.png: str | None = _text(bundle.get("image/png"))
        self.jpeg: str | None = _text(bundle.get("image/jpeg"))
        self.pdf: str | None = _text(bundle.get("application/pdf"))
        self.latex: str | None = _text(bundle.get("text/latex"))
        self.json: Any = bundle.get("application/json")
        self.javascript: str | None = _text(bundle.get("application/javascript"))
        self.data: dict[str, Any] | None = _data(bundle)
        self.chart: Chart | None = chart_from_dict(bundle.get(CHART_MIME))
        extra = {key: value for key, value in bundle.items() if key not in CONSUMED}
        self.extra: dict[str, Any] | None = extra or None

    def __getitem__(self, item: str) -> Any:
        return getattr(self, item)

    def formats(self) -> list[str]:
        """The formats present besides `text`, then the `extra` mime types."""
        present = [name for name in FORMATS.values() if getattr(self, name) is not None]
        present += [name for name in ("data", "chart") if getattr(self, name) is not None]
        return present + list(self.extra or {})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("text", *FORMATS.values(), "data"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        if self.chart is not None:
            out["chart"] = self.chart.to_dict()
        if self.extra:
            out["extra"] = self.extra
        return out

    def __str__(self) -> str:
        return self.text or ""

    def __repr__(self) -> str:
        return f"Result({self.text!r})" if self.text is not None else f"Result({self.formats()})"

    def _repr_html_(self) -> str | None:
        return self.html

    def _repr_markdown_(self) -> str | None:
        return self.markdown

    def _repr_svg_(self) -> str | None:
        return self.svg

    def _repr_png_(self) -> str | None:
        return self.png

    def _repr_jpeg_(self) -> str | None:
        return self.jpeg

    def _repr_latex_(self) -> str | None:
        return self.latex

    def _repr_json_(self) -> Any:
        return self.json

    def _repr_javascript_(self) -> str | None:
        return self.javascript


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):  # nbformat may split text into lines
        value = "".join(str(part) for part in value)
    text = str(value)
    # E2B's server gives a string's text without the quotes of its repr ('bar' is bar).
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _data(bundle: Mapping[str, Any]) -> dict[str, Any] | None:
    columns = bundle.get(COLUMNS_MIME)
    if isinstance(columns, Mapping):
        return dict(columns)
    table = bundle.get(TABLE_MIME)
    if isinstance(table, Mapping):
        return columns_from_table(table)
    return None


@dataclass
class Logs:
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"stdout": self.stdout, "stderr": self.stderr})


@dataclass
class Execution:
    results: list[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: ExecutionError | None = None
    execution_count: int | None = None

    @property
    def text(self) -> str | None:
        """The cell's value as text (its main result's), None without one."""
        for result in self.results:
            if result.is_main_result:
                return result.text
        return None

    def to_json(self) -> str:
        return json.dumps(
            {
                "results": [result.to_dict() for result in self.results],
                "logs": {"stdout": self.logs.stdout, "stderr": self.logs.stderr},
                "error": None if self.error is None else json.loads(self.error.to_json()),
                "execution_count": self.execution_count,
            }
        )


@dataclass
class Context:
    """A code context: its own kernel, with a language and a working folder."""

    id: str
    language: str
    cwd: str
