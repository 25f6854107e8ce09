"""E2B's chart classes, built from the chart JSON a result carries
(`application/vnd.cellmate.chart+json`, in E2B's shape: `type`, `title`, `elements`, and for
2D charts labels, units, ticks and scales)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class ChartType(enum.StrEnum):
    LINE = "line"
    SCATTER = "scatter"
    BAR = "bar"
    PIE = "pie"
    BOX_AND_WHISKER = "box_and_whisker"
    SUPERCHART = "superchart"
    UNKNOWN = "unknown"


class ScaleType(enum.StrEnum):
    LINEAR = "linear"
    DATETIME = "datetime"
    CATEGORICAL = "categorical"
    LOG = "log"
    SYMLOG = "symlog"
    LOGIT = "logit"
    FUNCTION = "function"
    FUNCTIONLOG = "functionlog"
    ASINH = "asinh"
    UNKNOWN = "unknown"


def _chart_type(value: Any) -> ChartType:
    try:
        return ChartType(value or ChartType.UNKNOWN)
    except ValueError:
        return ChartType.UNKNOWN


def _scale(value: Any) -> ScaleType:
    try:
        return ScaleType(value)
    except ValueError:
        return ScaleType.UNKNOWN


class Chart:
    """A chart's extracted data; `to_dict()` gives back the JSON it was built from."""

    def __init__(self, **data: Any) -> None:
        self._raw = dict(data)
        self.type: ChartType = _chart_type(data.get("type"))
        self.title: str | None = data.get("title")
        self.elements: list[Any] = list(data.get("elements") or [])

    def to_dict(self) -> dict[str, Any]:
        return self._raw


class Chart2D(Chart):
    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.x_label: str | None = data.get("x_label")
        self.y_label: str | None = data.get("y_label")
        self.x_unit: str | None = data.get("x_unit")
        self.y_unit: str | None = data.get("y_unit")


class PointData:
    def __init__(self, **data: Any) -> None:
        self.label: str = data.get("label", "")
        self.points: list[tuple[Any, Any]] = [(x, y) for x, y in data.get("points") or []]


class PointChart(Chart2D):
    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.x_ticks: list[Any] = list(data.get("x_ticks") or [])
        self.x_tick_labels: list[str] = list(data.get("x_tick_labels") or [])
        self.x_scale: ScaleType = _scale(data.get("x_scale"))
        self.y_ticks: list[Any] = list(data.get("y_ticks") or [])
        self.y_tick_labels: list[str] = list(data.get("y_tick_labels") or [])
        self.y_scale: ScaleType = _scale(data.get("y_scale"))
        self.elements = [PointData(**element) for element in data.get("elements") or []]


class LineChart(PointChart):
    pass


class ScatterChart(PointChart):
    pass


class BarData:
    def __init__(self, **data: Any) -> None:
        self.label: str = data.get("label", "")
        self.group: str = data.get("group", "")
        self.value: Any = data.get("value")


class BarChart(Chart2D):
    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.elements = [BarData(**element) for element in data.get("elements") or []]


class PieData:
    def __init__(self, **data: Any) -> None:
        self.label: str = data.get("label", "")
        self.angle: float = data.get("angle", 0.0)
        self.radius: float = data.get("radius", 0.0)


class PieChart(Chart):
    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.elements = [PieData(**element) for element in data.get("elements") or []]


class BoxAndWhiskerData:
    def __init__(self, **data: Any) -> None:
        self.label: str = data.get("label", "")
        self.min: float = data.get("min", 0.0)
        self.first_quartile: float = data.get("first_quartile", 0.0)
        self.median: float = data.get("median", 0.0)
        self.third_quartile: float = data.get("third_quartile", 0.0)
        self.max: float = data.get("max", 0.0)
        self.outliers: list[float] = list(data.get("outliers") or [])


class BoxAndWhiskerChart(Chart2D):
    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.elements = [BoxAndWhiskerData(**element) for element in data.get("elements") or []]


class SuperChart(Chart):
    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        charts = (chart_from_dict(element) for element in data.get("elements") or [])
        self.elements = [chart for chart in charts if chart is not None]


ChartTypes = LineChart | ScatterChart | BarChart | PieChart | BoxAndWhiskerChart | SuperChart

_CLASSES: dict[ChartType, type[Chart]] = {
    ChartType.LINE: LineChart,
    ChartType.SCATTER: ScatterChart,
    ChartType.BAR: BarChart,
    ChartType.PIE: PieChart,
    ChartType.BOX_AND_WHISKER: BoxAndWhiskerChart,
    ChartType.SUPERCHART: SuperChart,
}


def chart_from_dict(data: Mapping[str, Any] | None) -> Chart | None:
    """The chart class for the JSON's `type` (`Chart` for an unknown one); None for none."""
    if not data:
        return None
    kind = _chart_type(data.get("type"))
    return _CLASSES.get(kind, Chart)(**data)
