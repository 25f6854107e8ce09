"""ggplot2's charts from the R kernel as data beside their pictures, on a real sandbox: the
same shapes and MIME type as a matplotlib figure's (test_charts.py), capped the same way,
and told to the model the same way; base graphics and a plot that cannot be read back stay
pictures."""

from __future__ import annotations

from typing import Any

import pytest

from bot.agent.prompt import tool_result
from executor import ExecutionResult, Executor, Status
from executor.models import CHART_MIME
from tests.support.charts import assert_capped_line

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

PLOTS = """
library(ggplot2)
days <- as.Date("2024-01-01") + 0:29
waves <- data.frame(
  day = rep(days, 2),
  amplitude = c(sin(seq(0, 3, length.out = 30)), cos(seq(0, 3, length.out = 30))),
  wave = rep(c("sin", "cos"), each = 30)
)
print(
  ggplot(waves, aes(day, amplitude, colour = wave)) + geom_line() +
    labs(title = "Waves", x = "Day", y = "Amplitude (Hz)", colour = "Wave")
)
sales <- data.frame(author = c("Ann", "Bob", "Cy"), sold = c(100, 200, 300))
print(ggplot(sales, aes(author, sold)) + geom_col() + labs(title = "Sales", x = "Authors"))
dots <- data.frame(a = c(1, 2, 3, 4, 5, 1, 2), b = c(2.5, 1, 4, 3, 5, 9, 8),
                   set = c(rep("Dataset 1", 5), "Dataset 2", "Dataset 2"))
print(ggplot(dots, aes(a, b, shape = set)) + geom_point() + labs(x = "A"))
early <- data.frame(answer = c("No", "Yes"), n = c(90, 10))
print(
  ggplot(early, aes(x = "", y = n, fill = answer)) + geom_col(width = 1) +
    coord_polar(theta = "y") + ggtitle("Early?")
)
books <- data.frame(author = rep(c("Ann", "Bob"), 2), year = rep(c("2023", "2024"), each = 2),
                    sold = c(10, 20, 30, 40))
print(ggplot(books, aes(author, sold, fill = year)) + geom_col(position = "dodge"))
print(ggplot(mtcars, aes(mpg)) + geom_histogram(bins = 3) + facet_wrap(~am))
plot(1:10, main = "base")
"""


def _pictures(result: ExecutionResult) -> list[Any]:
    assert result.status is Status.OK, result.message
    assert result.stderr == ""
    for rich in result.results:
        png = rich.image_bytes("image/png")
        assert png is not None
        assert png.startswith(b"\x89PNG")  # the picture is still there, beside any data
    return list(result.results)


async def test_ggplot_charts_come_back_as_data_beside_their_pictures(executor: Executor) -> None:
    result = await executor.session("r-charts").run(PLOTS, language="r")
    line, bar, scatter, pie, grouped, facets, base = (rich.chart for rich in _pictures(result))
    assert line is not None
    assert bar is not None
    assert scatter is not None
    assert pie is not None
    assert grouped is not None
    assert facets is not None

    assert line["type"] == "line"
    assert line["title"] == "Waves"
    assert (line["x_label"], line["y_label"]) == ("Day", "Amplitude (Hz)")
    assert (line["x_unit"], line["y_unit"]) == (None, "Hz")
    assert (line["x_scale"], line["y_scale"]) == ("datetime", "linear")
    assert [e["label"] for e in line["elements"]] == ["cos", "sin"]  # the legend's order
    sine = line["elements"][1]["points"]
    assert len(sine) == 30
    assert sine[0] == ["2024-01-01T00:00:00", 0]
    assert sine[-1][0] == "2024-01-30T00:00:00"
    assert all(isinstance(tick, str) for tick in line["x_ticks"])
    assert len(line["x_ticks"]) == len(line["x_tick_labels"])
    assert "truncated" not in line

    assert bar["type"] == "bar"
    assert bar["title"] == "Sales"
    assert (bar["x_label"], bar["x_scale"]) == ("Authors", "categorical")
    assert [(e["label"], e["group"], e["value"]) for e in bar["elements"]] == [
        ("Ann", "", 100),
        ("Bob", "", 200),
        ("Cy", "", 300),
    ]

    assert scatter["type"] == "scatter"
    assert scatter["title"] is None
    assert scatter["x_label"] == "A"
    assert [e["label"] for e in scatter["elements"]] == ["Dataset 1", "Dataset 2"]
    assert scatter["elements"][0]["points"][:2] == [[1, 2.5], [2, 1]]
    assert scatter["elements"][1]["points"] == [[1, 9], [2, 8]]

    assert pie["type"] == "pie"
    assert pie["title"] == "Early?"
    assert [(e["label"], e["angle"], e["radius"]) for e in pie["elements"]] == [
        ("No", 324, 1),
        ("Yes", 36, 1),
    ]

    # One bar per author and year, each series named by the legend.
    assert [(e["label"], e["group"], e["value"]) for e in grouped["elements"]] == [
        ("Ann", "2023", 10),
        ("Bob", "2023", 20),
        ("Ann", "2024", 30),
        ("Bob", "2024", 40),
    ]

    # Facets: one chart per panel, as matplotlib's several axes.
    assert facets["type"] == "superchart"
    assert [(c["type"], c["title"]) for c in facets["elements"]] == [("bar", "0"), ("bar", "1")]
    assert sum(e["value"] for c in facets["elements"] for e in c["elements"]) == 32

    # Base graphics: the picture only.
    assert base is None
    assert CHART_MIME not in result.results[-1].data

    # The model is told the numbers behind each picture, as for Python's charts.
    told = tool_result(result, [], budget=20_000)
    assert 'chart data: line "Waves"; x: Day (datetime), y: Amplitude (Hz)' in told
    assert 'bar "Sales"; x: Authors (categorical), y: sold\nAnn = 100; Bob = 200' in told
    assert "No 90.0%; Yes 10.0%" in told
    assert "Ann [2023] = 10; Bob [2023] = 20; Ann [2024] = 30; Bob [2024] = 40" in told


@pytest.mark.parametrize("runtime", ["runc"])
async def test_a_large_ggplot_comes_back_capped_and_small(executor: Executor) -> None:
    result = await executor.session("r-big").run(
        "library(ggplot2)\n"
        "x <- 0:9999\n"
        "ggplot(data.frame(x = x, y = sin(x / 100)), aes(x, y)) + geom_line()",
        language="r",
    )
    (rich,) = _pictures(result)
    chart = rich.chart
    assert chart is not None
    assert_capped_line(chart)
    told = tool_result(result, [], budget=8_000)
    assert ": 10,000 points, x 0..9999, y -1..1" in told
    assert "(the chart data was cut" in told


@pytest.mark.parametrize("runtime", ["runc"])
async def test_a_ggplot_that_cannot_be_read_still_displays(executor: Executor) -> None:
    # The layer's data can be had once (for the picture), not again (for the chart data).
    session = executor.session("r-unreadable")
    result = await session.run(
        "library(ggplot2)\n"
        "calls <- 0\n"
        "once <- function(d) {\n"
        "  calls <<- calls + 1\n"
        "  if (calls > 1) stop('no data today')\n"
        "  data.frame(x = 1:3, y = c(2, 4, 8))\n"
        "}\n"
        "ggplot(mapping = aes(x, y)) + geom_point(data = once)",
        language="r",
    )
    (rich,) = _pictures(result)
    assert CHART_MIME not in rich.data
    assert rich.chart is None
    # The next plot has its data again.
    again = await session.run(
        "ggplot(data.frame(x = 1, y = 2), aes(x, y)) + geom_point()", language="r"
    )
    (rich,) = _pictures(again)
    assert rich.chart is not None
    assert rich.chart["elements"] == [{"label": "", "points": [[1, 2]]}]
