"""A figure's chart data and a DataFrame's columns on the host: the result's properties,
what the model is told of a chart, and the kernel side's helpers that need no matplotlib."""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bot.agent.chart_text import SUMMARY_CHARS, chart_summary
from bot.agent.prompt import tool_result
from executor import ExecutionResult, RichResult, Status
from executor.models import CHART_MIME, COLUMNS_MIME
from storage.artifacts import Artifact

LINE: dict[str, Any] = {
    "type": "line",
    "title": "Plot of sin(x)",
    "x_label": "Time (s)",
    "y_label": "Amplitude",
    "x_unit": "s",
    "y_unit": None,
    "x_scale": "linear",
    "y_scale": "log",
    "x_ticks": [0.0, 50.0, 100.0],
    "x_tick_labels": ["0", "50", "100"],
    "y_ticks": [1.0, 10.0],
    "y_tick_labels": ["10^{0}", "10^{1}"],
    "elements": [
        {
            "label": "sin(x)",
            "points": [[float(i), 1.0 + i / 10] for i in range(0, 1000, 10)],
            "truncated": True,
            "total_points": 10_000,
        },
        {"label": "marks", "points": [[1.0, 2.0], [3.0, 4.5]]},
    ],
    "truncated": True,
}
BAR: dict[str, Any] = {
    "type": "bar",
    "title": "Book Sales",
    "x_label": "Authors",
    "y_label": None,
    "x_unit": None,
    "y_unit": None,
    "elements": [
        {"label": "Author A", "group": "Books Sold", "value": 100.0},
        {"label": "Author B", "group": "Books Sold", "value": 200.0},
    ],
}
PIE: dict[str, Any] = {
    "type": "pie",
    "title": "Wake up early?",
    "elements": [
        {"label": "No", "angle": 324.0, "radius": 1.0},
        {"label": "Yes", "angle": 36.0, "radius": 1.0},
    ],
}
BOX: dict[str, Any] = {
    "type": "box_and_whisker",
    "title": "Scores",
    "x_label": "Class",
    "y_label": "Score",
    "elements": [
        {
            "label": "Class B",
            "min": 84.0,
            "first_quartile": 84.75,
            "median": 88.0,
            "third_quartile": 90.5,
            "max": 95.0,
            "outliers": [76.0],
        }
    ],
}


def _bundle(chart: Any) -> RichResult:
    return RichResult(data={"image/png": "iVBO", "text/plain": "<Figure>", CHART_MIME: chart})


def test_chart_and_columns_read_their_mime_types() -> None:
    assert _bundle(LINE).chart == LINE
    assert _bundle(json.dumps(BAR)).chart == BAR  # as a notebook file may hold it
    assert RichResult(data={"text/plain": "x"}).chart is None
    assert _bundle("not json").chart is None
    assert _bundle([1, 2]).chart is None
    frame = RichResult(
        data={"text/plain": "   a\n0  1", COLUMNS_MIME: {"a": [1, None], "b": ["x", "y"]}},
        metadata={COLUMNS_MIME: {"rows": 2, "columns": 2}},
    )
    assert frame.columns == {"a": [1, None], "b": ["x", "y"]}
    assert frame.chart is None
    assert RichResult(data={COLUMNS_MIME: {"a": 1}}).columns is None
    assert RichResult(data={"text/plain": "1"}).columns is None


def test_line_summary_gives_counts_ranges_and_scales() -> None:
    said = chart_summary(LINE)
    assert said.startswith('line "Plot of sin(x)"; x: Time (s), y: Amplitude (log)')
    assert "sin(x): 10,000 points, x 0..990, y 1..100" in said
    assert "marks: (1, 2), (3, 4.5)" in said
    assert "cut" in said
    assert len(said) <= SUMMARY_CHARS


def test_dates_and_categories_read_as_text() -> None:
    days = [[f"2024-01-{day:02}T00:00:00", float(day)] for day in range(1, 31)]
    dated = {"type": "line", "x_scale": "datetime", "elements": [{"label": "d", "points": days}]}
    assert chart_summary(dated) == (
        "line; x: datetime\nd: 30 points, x 2024-01-01..2024-01-30, y 1..30; "
        "first (2024-01-01, 1), last (2024-01-30, 30)"
    )
    named = {"type": "line", "elements": [{"label": "r", "points": [["Jan", 10], ["Feb", 30]]}]}
    assert chart_summary(named) == "line\nr: (Jan, 10), (Feb, 30)"


def test_bar_pie_and_box_summaries_give_the_values() -> None:
    assert chart_summary(BAR) == (
        'bar "Book Sales"; x: Authors\nAuthor A [Books Sold] = 100; Author B [Books Sold] = 200'
    )
    assert chart_summary(PIE) == 'pie "Wake up early?"\nNo 90.0%; Yes 10.0%'
    assert chart_summary(BOX) == (
        'box_and_whisker "Scores"; x: Class, y: Score\n'
        "Class B: min 84, q1 84.75, median 88, q3 90.5, max 95, 1 outliers"
    )


def test_superchart_summary_lists_its_charts_within_the_cap() -> None:
    many = {"type": "superchart", "title": "Overview", "elements": [LINE, BAR, PIE] * 10}
    said = chart_summary(many, limit=300)
    assert said.startswith('30 charts "Overview"\n[1] line "Plot of sin(x)"')
    assert len(said) == 300
    assert said.endswith("…")
    assert chart_summary({"type": "unknown", "title": "Circles", "elements": []}) == (
        'unknown "Circles"'
    )
    # Junk in a bundle is summarised as far as it goes, never raises.
    assert chart_summary({"type": "line", "elements": [{"points": [[1]]}, "x"]}) == (
        "line\n(unlabelled): "
    )


def test_the_model_gets_the_chart_data_beside_the_delivered_picture() -> None:
    result = ExecutionResult(
        status=Status.OK,
        results=(_bundle(BAR), RichResult(data={"image/png": "iVBO"}, metadata={})),
    )
    picture = Artifact(
        name="chart-1.png",
        size=1234,
        content_type="image/png",
        status="published",
        inline_image=True,
    )
    told = tool_result(result, [picture], budget=8000)
    assert told == (
        "status: ok\n"
        'chart data: bar "Book Sales"; x: Authors\n'
        "Author A [Books Sold] = 100; Author B [Books Sold] = 200\n"
        "chart chart-1.png (1,234 bytes) was delivered to the user."
    )
    # A small budget keeps the summary small.
    assert (
        len(tool_result(ExecutionResult(status=Status.OK, results=(_bundle(LINE),)), [], 400))
        <= 400
    )


def test_an_r_chart_reaches_the_model_as_a_python_one() -> None:
    # As the R kernel sends a ggplot's (runner/charts.R): a categorical x, unnamed series.
    ggplot = {
        "type": "bar",
        "title": "Sales",
        "x_label": "Authors",
        "y_label": "sold",
        "x_unit": None,
        "y_unit": None,
        "elements": [
            {"label": "Ann", "group": "", "value": 100},
            {"label": "Bob", "group": "", "value": 200},
        ],
        "x_scale": "categorical",
        "y_scale": "linear",
    }
    bundle = RichResult(
        data={"text/plain": "plot without title", "image/png": "iVBO", CHART_MIME: ggplot}
    )
    told = tool_result(ExecutionResult(status=Status.OK, results=(bundle,)), [], budget=8000)
    assert told == (
        "status: ok\n"
        'chart data: bar "Sales"; x: Authors (categorical), y: sold\n'
        "Ann = 100; Bob = 200"
    )


def test_the_r_kernel_side_names_the_same_mime_type_and_caps(kernel_side: ModuleType) -> None:
    code = (Path(__file__).parents[2] / "environments/jupyter/runner/charts.R").read_text()
    assert f'chart_mime <- "{CHART_MIME}"' in code
    for name, value in (
        ("max_points", kernel_side.MAX_POINTS),
        ("max_chart_points", kernel_side.MAX_CHART_POINTS),
        ("max_elements", kernel_side.MAX_ELEMENTS),
        ("max_axes", kernel_side.MAX_AXES),
        ("max_ticks", kernel_side.MAX_TICKS),
        ("max_text", kernel_side.MAX_TEXT),
    ):
        assert f"  {name} <- {value} " in code or f"  {name} <- {value}\n" in code, name


@pytest.fixture(scope="module")
def kernel_side() -> ModuleType:
    """The sandbox's runner/charts.py, loaded by its path as the kernel loads it."""
    path = Path(__file__).parents[2] / "environments/jupyter/runner/charts.py"
    spec = importlib.util.spec_from_file_location("_cellmate_charts_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernel_side_names_the_same_mime_types(kernel_side: ModuleType) -> None:
    assert kernel_side.CHART_MIME == CHART_MIME
    assert kernel_side.COLUMNS_MIME == COLUMNS_MIME


def test_kernel_side_labels_units_and_tick_text(kernel_side: ModuleType) -> None:
    assert kernel_side.unit("Time (s)") == "s"
    assert kernel_side.unit("Y-axis (log scale)") == "log scale"
    assert kernel_side.unit("Size [MB]") == "MB"
    assert kernel_side.unit("Authors") is None
    assert kernel_side.text("") is None
    assert kernel_side.text("_child0") is None
    assert kernel_side.text("x" * 500) == "x" * kernel_side.MAX_TEXT
    assert kernel_side.tick_text("$\\mathdefault{10^{2}}$") == "10^{2}"
    assert kernel_side.tick_text("\u22120.5") == "-0.5"


def test_kernel_side_samples_evenly_within_a_budget(kernel_side: ModuleType) -> None:
    assert kernel_side.sample(5, 10) == [0, 1, 2, 3, 4]
    kept = kernel_side.sample(10_000, 1_000)
    assert len(kept) == 1_000
    assert kept[0] == 0
    assert kept[-1] == 9_999
    assert kept == sorted(set(kept))
    budget = kernel_side.Budget(points=1_500)
    assert budget.take(10_000) == kernel_side.MAX_POINTS
    assert budget.take(800) == 500
    assert budget.take(50) == 2  # a line keeps its ends, whatever is left
    assert budget.cut


def test_kernel_side_makes_cells_json_safe(kernel_side: ModuleType) -> None:
    plain = kernel_side.plain
    assert plain(math.nan) is None
    assert plain(math.inf) is None
    assert plain(datetime.datetime(2024, 1, 2, 3, 4)) == "2024-01-02T03:04:00"
    assert plain(datetime.date(2024, 1, 2)) == "2024-01-02"
    assert plain(2**70) == str(2**70)
    assert plain(True) is True
    assert plain(b"\x01") == "01"
    assert plain(object).startswith("<class")
    assert kernel_side.number("x") is None
    assert kernel_side.number(3) == 3.0
