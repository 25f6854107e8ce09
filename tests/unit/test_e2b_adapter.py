"""The E2B adapter's mapping (bench/e2b), without sandboxes: mime bundles to results, chart
JSON to chart classes, Cellmate's outcomes to E2B's, E2B's paths to /mnt/data."""

from __future__ import annotations

import json

import pytest

from bench.e2b.charts import (
    BarChart,
    Chart,
    ChartType,
    LineChart,
    ScaleType,
    ScatterChart,
    SuperChart,
    chart_from_dict,
)
from bench.e2b.errors import TimeoutException
from bench.e2b.models import CHART_MIME, COLUMNS_MIME, TABLE_MIME, Execution, Result
from bench.e2b.sandbox import (
    KILLED,
    data_path,
    decoded,
    entry_of,
    execution_of,
    language_of,
    run_features,
)
from executor import ExecutionError, ExecutionResult, FileInfo, RichResult, Status

BAR = {
    "type": "bar",
    "title": "Book Sales",
    "x_label": "Authors",
    "y_label": "Books",
    "x_unit": None,
    "y_unit": None,
    "elements": [
        {"label": "A", "group": "Sold", "value": 100},
        {"label": "B", "group": "Sold", "value": 200},
    ],
}
LINE = {
    "type": "line",
    "title": "Sine",
    "x_label": None,
    "y_label": None,
    "x_scale": "linear",
    "y_scale": "no-such-scale",
    "x_ticks": [0, 1],
    "x_tick_labels": ["0", "1"],
    "y_ticks": [],
    "y_tick_labels": [],
    "elements": [{"label": "sin", "points": [[0, 0.0], [1, 0.84]]}],
}


def test_a_bundle_gives_each_format_its_field_and_the_rest_to_extra() -> None:
    bundle = {
        "text/plain": ["<Figure ", "640x480>"],
        "image/png": "iVBOR",
        "text/html": "<b>x</b>",
        "application/x-custom": {"a": 1},
    }
    result = Result(bundle, is_main_result=False)
    assert result.text == "<Figure 640x480>"
    assert result.png == "iVBOR"
    assert result.formats() == ["html", "png", "application/x-custom"]
    assert result.extra == {"application/x-custom": {"a": 1}}
    assert result["html"] == "<b>x</b>"
    assert Result({"text/latex": r"\text{x}"}).formats() == ["latex"]
    assert Result({"text/plain": "1", "image/png": "i"}).extra is None


def test_a_strings_text_loses_its_quotes_as_on_e2bs_server() -> None:
    assert Result({"text/plain": "'bar'"}).text == "bar"
    assert Result({"text/plain": '"it\'s"'}).text == "it's"
    assert Result({"text/plain": "'"}).text == "'"
    assert Result({"text/plain": "['a', 'b']"}).text == "['a', 'b']"


def test_the_execution_text_is_the_main_results() -> None:
    shown = Result({"text/plain": "shown"})
    value = Result({"text/plain": "2"}, is_main_result=True)
    assert Execution(results=[shown, value]).text == "2"
    assert Execution(results=[shown]).text is None


def test_data_comes_from_columns_or_else_from_the_table_schema() -> None:
    columns = Result({COLUMNS_MIME: {"a": [1, 2, 3]}, TABLE_MIME: {"data": []}})
    assert columns.data == {"a": [1, 2, 3]}
    table = {
        "schema": {"fields": [{"name": "index"}, {"name": "a"}], "primaryKey": ["index"]},
        "data": [{"index": 0, "a": 1}, {"index": 1, "a": 2}],
    }
    assert Result({TABLE_MIME: table}).data == {"a": [1, 2]}
    assert Result({"text/plain": "x"}).data is None
    assert "data" in Result({TABLE_MIME: table}).formats()


def test_chart_json_becomes_the_chart_class_of_its_type() -> None:
    bar = chart_from_dict(BAR)
    assert isinstance(bar, BarChart)
    assert bar.type == ChartType.BAR
    assert bar.x_label == "Authors"
    assert bar.x_unit is None
    assert [(e.label, e.group, e.value) for e in bar.elements] == [
        ("A", "Sold", 100),
        ("B", "Sold", 200),
    ]
    line = chart_from_dict(LINE)
    assert isinstance(line, LineChart)
    assert line.x_scale == ScaleType.LINEAR
    assert line.y_scale == ScaleType.UNKNOWN
    assert line.elements[0].points == [(0, 0.0), (1, 0.84)]
    unknown = chart_from_dict({"type": "circles", "title": "Two", "elements": []})
    assert type(unknown) is Chart
    assert unknown.type == ChartType.UNKNOWN
    assert chart_from_dict(None) is None


def test_a_superchart_holds_its_charts() -> None:
    scatter = {**LINE, "type": "scatter", "title": "Dots"}
    chart = chart_from_dict({"type": "superchart", "title": "Both", "elements": [LINE, scatter]})
    assert isinstance(chart, SuperChart)
    assert [type(c) for c in chart.elements] == [LineChart, ScatterChart]
    assert chart.to_dict()["elements"][1]["title"] == "Dots"


def test_an_execution_serializes_its_chart_as_the_json_it_came_from() -> None:
    result = Result({"text/plain": "<Figure>", "image/png": "i", CHART_MIME: BAR})
    assert isinstance(result.chart, BarChart)
    assert "chart" in result.formats()
    serialized = json.loads(Execution(results=[result]).to_json())
    assert serialized["results"][0]["chart"]["type"] == "bar"
    assert serialized["results"][0]["png"] == "i"


def test_cellmate_results_become_executions() -> None:
    error = ExecutionError("NameError", "name 'x' is not defined", ("Traceback", "NameError"))
    result = ExecutionResult(
        Status.ERROR,
        stdout="a\nb\n",
        results=(RichResult({"text/plain": "1"}, is_main_result=True),),
        error=error,
        execution_count=3,
    )
    execution = execution_of(result, ["a\n", "b\n"], [], killed=False)
    assert execution.logs.stdout == ["a\n", "b\n"]
    assert execution.text == "1"
    assert execution.execution_count == 3
    assert execution.error is not None
    assert execution.error.name == "NameError"
    assert execution.error.traceback == "Traceback\nNameError"
    assert execution_of(result, [], [], killed=False).logs.stdout == ["a\nb\n"]


def test_time_limits_and_kills_raise_as_e2b_does() -> None:
    with pytest.raises(TimeoutException):
        execution_of(ExecutionResult(Status.TIMEOUT, message="3 s"), [], [], killed=False)
    with pytest.raises(TimeoutException, match=KILLED):
        execution_of(ExecutionResult(Status.KILLED), [], [], killed=True)
    died = execution_of(ExecutionResult(Status.KILLED, message="died"), [], [], killed=False)
    assert died.error is not None
    assert died.error.value == "died"


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/home/user", ""),
        ("/home/user/a/b.csv", "a/b.csv"),
        ("/mnt/data", ""),
        ("/mnt/data/x", "x"),
        ("sub/dir/", "sub/dir"),
        ("/root", None),
        ("/home/username", None),
    ],
)
def test_e2b_paths_map_into_mnt_data(path: str, inside: str | None) -> None:
    assert data_path(path) == inside


def test_languages_and_features() -> None:
    assert [language_of(n) for n in (None, "js", "ts", "R", "python")] == [
        "python",
        "javascript",
        "typescript",
        "r",
        "python",
    ]
    assert run_features() <= {"language", "env", "cwd"}


def test_file_entries_and_reads_in_e2b_shapes() -> None:
    entry = entry_of(FileInfo("in/2025/sales.csv", "file", 12, 1.5))
    assert (entry.name, entry.path, entry.type, entry.size) == (
        "sales.csv",
        "/mnt/data/in/2025/sales.csv",
        "file",
        12,
    )
    assert entry_of(FileInfo("in", "dir", 0, 0.0)).type == "dir"
    assert decoded([b"he", b"llo"], "text") == "hello"
    assert decoded([b"he", b"llo"], "bytes") == bytearray(b"hello")
    assert list(decoded([b"he", b"llo"], "stream")) == [b"he", b"llo"]
