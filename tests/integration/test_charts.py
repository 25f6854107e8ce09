"""A figure's chart data beside its PNG, and a DataFrame's columns, from a real sandbox: the
shapes E2B's code interpreter gives, capped, and what the model is told of them."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from bot.agent.prompt import tool_result
from executor import Executor, Status
from executor.models import CHART_MIME, COLUMNS_MIME
from tests.support.charts import assert_capped_line

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

PLOTS = {
    "line": """
import datetime
import numpy as np
import matplotlib.pyplot as plt
days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(30)]
plt.plot(days, np.sin(np.linspace(0, 3, 30)), label="sin")
plt.plot(days, np.cos(np.linspace(0, 3, 30)), label="cos")
plt.xlabel("Day")
plt.ylabel("Amplitude (Hz)")
plt.title("Waves")
plt.legend()
plt.show()
""",
    "bar": """
plt.bar(["Ann", "Bob", "Cy"], [100, 200, 300], label="Books Sold")
plt.xlabel("Authors")
plt.title("Sales")
plt.show()
""",
    "scatter": """
plt.scatter([1, 2, 3, 4, 5], [2.5, 1, 4, 3, 5], label="Dataset 1")
plt.scatter([1, 2], [9, 8], label="Dataset 2")
plt.xlabel("A")
plt.show()
""",
    "pie": """
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["No", "Yes"], startangle=90)
ax.set_title("Early?")
plt.show()
""",
    "box": """
fig, ax = plt.subplots()
ax.boxplot([[85, 90, 78, 92, 88], [95, 89, 76, 91, 84, 87]], tick_labels=["A", "B"])
ax.set_title("Scores")
plt.show()
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 9]], orientation="horizontal", notch=True)
plt.show()
""",
    "superchart": """
fig, axs = plt.subplots(1, 2)
fig.suptitle("Two")
axs[0].plot([0, 1, 2], [0, 1, 4])
axs[0].set_title("Square")
axs[1].scatter([1, 2], [3, 4])
axs[1].set_title("Dots")
plt.show()
""",
    "log": """
x = np.linspace(1, 10, 50)
plt.plot(x, np.exp(x), label="e^x")
plt.yscale("log")
plt.ylabel("Y (log scale)")
plt.show()
""",
    "pandas": """
import pandas as pd
sales = pd.DataFrame({"month": ["Jan", "Feb", "Mar"], "revenue": [10, 30, 20]})
sales.plot(x="month", y="revenue", title="Revenue")
plt.show()
monthly = pd.Series([1.0, 2.0, 4.0], index=pd.date_range("2024-01-01", periods=3, freq="MS"))
monthly.plot(label="monthly")
plt.show()
""",
}


def _charts(result: Any) -> list[dict[str, Any]]:
    assert result.status is Status.OK, result.error
    charts = []
    for rich in result.results:
        assert "image/png" in rich.data  # the picture is still there, beside the data
        assert rich.chart is not None
        charts.append(rich.chart)
    return charts


async def test_charts_come_back_as_data_beside_their_pictures(executor: Executor) -> None:
    result = await executor.run_notebook(list(PLOTS.values()))
    line, bar, scatter, pie, box, notched, superchart, log, by_name, by_month = _charts(result)

    assert line["type"] == "line"
    assert line["title"] == "Waves"
    assert (line["x_label"], line["y_label"]) == ("Day", "Amplitude (Hz)")
    assert (line["x_unit"], line["y_unit"]) == (None, "Hz")
    assert (line["x_scale"], line["y_scale"]) == ("datetime", "linear")
    assert [e["label"] for e in line["elements"]] == ["sin", "cos"]
    first = line["elements"][0]["points"]
    assert len(first) == 30
    assert datetime.datetime.fromisoformat(first[0][0]) == datetime.datetime(2024, 1, 1)
    assert first[0][1] == 0.0
    assert all(isinstance(tick, str) for tick in line["x_ticks"])
    assert all(isinstance(label, str) for label in line["y_tick_labels"])
    assert "truncated" not in line

    assert bar["type"] == "bar"
    assert [(e["label"], e["group"], e["value"]) for e in bar["elements"]] == [
        ("Ann", "Books Sold", 100),
        ("Bob", "Books Sold", 200),
        ("Cy", "Books Sold", 300),
    ]

    assert scatter["type"] == "scatter"
    assert scatter["title"] is None
    assert [e["label"] for e in scatter["elements"]] == ["Dataset 1", "Dataset 2"]
    assert scatter["elements"][0]["points"][:2] == [[1, 2.5], [2, 1]]

    assert pie["type"] == "pie"
    assert [(e["label"], e["angle"], e["radius"]) for e in pie["elements"]] == [
        ("No", 324, 1),
        ("Yes", 36, 1),
    ]

    assert box["type"] == "box_and_whisker"
    assert [e["label"] for e in box["elements"]] == ["A", "B"]
    b = box["elements"][1]
    assert (b["min"], b["first_quartile"], b["median"], b["third_quartile"], b["max"]) == (
        84,
        84.75,
        88,
        90.5,
        95,
    )
    assert b["outliers"] == [76]
    (n,) = notched["elements"]
    assert (n["min"], n["first_quartile"], n["median"], n["third_quartile"], n["max"]) == (
        1,
        2,
        3,
        4,
        4,
    )
    assert n["outliers"] == [9]

    assert superchart["type"] == "superchart"
    assert superchart["title"] == "Two"
    assert [(c["type"], c["title"]) for c in superchart["elements"]] == [
        ("line", "Square"),
        ("scatter", "Dots"),
    ]
    assert superchart["elements"][0]["elements"][0]["points"] == [[0, 0], [1, 1], [2, 4]]

    assert log["y_scale"] == "log"
    assert log["y_unit"] == "log scale"
    assert all(isinstance(tick, float) for tick in log["y_ticks"])
    assert all("mathdefault" not in label for label in log["y_tick_labels"])

    # pandas: a column of text along x, and a time series (pandas' own date axis).
    assert by_name["title"] == "Revenue"
    assert by_name["elements"] == [
        {"label": "revenue", "points": [["Jan", 10], ["Feb", 30], ["Mar", 20]]}
    ]
    assert by_month["x_scale"] == "datetime"
    assert by_month["elements"][0]["points"] == [
        ["2024-01-01T00:00:00", 1],
        ["2024-02-01T00:00:00", 2],
        ["2024-03-01T00:00:00", 4],
    ]

    # The model is told the numbers behind each picture.
    told = tool_result(result, [], budget=20_000)
    assert 'chart data: line "Waves"; x: Day (datetime), y: Amplitude (Hz)' in told
    assert "Ann [Books Sold] = 100; Bob [Books Sold] = 200; Cy [Books Sold] = 300" in told
    assert "No 90.0%; Yes 10.0%" in told
    assert "B: min 84, q1 84.75, median 88, q3 90.5, max 95, 1 outliers" in told


@pytest.mark.parametrize("runtime", ["runc"])
async def test_a_large_chart_comes_back_capped_and_small(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import numpy as np, matplotlib.pyplot as plt\n"
        "x = np.arange(10_000)\n"
        "plt.plot(x, np.sin(x / 100), label='big')\n"
        "plt.show()"
    )
    (chart,) = _charts(result)
    assert_capped_line(chart)
    told = tool_result(result, [], budget=8_000)
    assert "big: 10,000 points, x 0..9999, y -1..1" in told


@pytest.mark.parametrize("runtime", ["runc"])
async def test_a_figure_that_cannot_be_read_still_displays(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\n"
        "ax.plot([1, 2, 3])\n"
        "def broken():\n"
        "    raise RuntimeError('no axes today')\n"
        "fig.get_axes = broken\n"
        "plt.show()"
    )
    assert result.status is Status.OK
    assert result.stderr == ""
    (rich,) = result.results
    assert "image/png" in rich.data
    assert CHART_MIME not in rich.data
    assert rich.chart is None


@pytest.mark.parametrize("runtime", ["runc"])
async def test_a_dataframe_comes_with_its_columns(executor: Executor) -> None:
    result = await executor.run_notebook(
        [
            "import pandas as pd, numpy as np\n"
            "frame = pd.DataFrame({\n"
            "    'city': ['Oslo', 'Lima', None],\n"
            "    'temp': [3.5, np.nan, 21.0],\n"
            "    'when': pd.to_datetime(['2024-01-01 00:00', None, '2024-03-01 12:30']),\n"
            "    'rainy': [True, False, True],\n"
            "    2024: [1, 2, 3],\n"
            "}, index=['a', 'b', 'c'])\n"
            "frame",
            "pd.DataFrame({'n': np.arange(100_000)})",
        ]
    )
    assert result.status is Status.OK
    small, large = result.results
    assert small.columns == {
        "city": ["Oslo", "Lima", None],
        "temp": [3.5, None, 21.0],
        "when": ["2024-01-01T00:00:00", None, "2024-03-01T12:30:00"],
        "rainy": [True, False, True],
        "2024": [1, 2, 3],
    }
    assert small.metadata[COLUMNS_MIME] == {"rows": 3, "columns": 5}
    assert "text/html" in small.data  # the table is still there
    assert large.columns is not None
    assert large.columns["n"][:3] == [0, 1, 2]
    assert len(large.columns["n"]) == 1_000
    assert large.metadata[COLUMNS_MIME] == {
        "rows": 100_000,
        "columns": 1,
        "truncated": True,
        "rows_kept": 1_000,
        "columns_kept": 1,
    }
