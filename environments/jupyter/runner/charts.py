"""A figure's data beside its PNG, and a DataFrame's columns: what the kernel's display
formatters add to a bundle, in the shapes E2B's code interpreter returns.

- `application/vnd.cellmate.chart+json` (`figure_chart`): the chart read back from a
  matplotlib figure: `type` (line, scatter, bar, pie, box_and_whisker, superchart for several
  axes, unknown), `title`, the axes' labels, units, scales, ticks and tick labels, and
  `elements` (lines and scatters: label and points; bars: label, group and value; pie
  slices: label, angle and radius; boxes: label, min, quartiles, median, max, outliers).
- `application/vnd.cellmate.columns+json` (`frame_columns`): `{column: [values, ...]}`, as
  `DataFrame.to_dict(orient="list")` without the index, made JSON-safe.

Both are capped (points per element, elements, rows, bytes) and say when they were cut. The
kernel's set-up (kernel_scripts.KERNEL_SETUP) loads this file, by its path, the first time a
figure or a DataFrame is displayed; it imports only the standard library, and finds
matplotlib's and pandas' modules already imported (a figure or a frame exists). Extraction is
best effort: the set-up turns any exception into no entry, so the display itself never fails.
"""

from __future__ import annotations

import datetime
import importlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

CHART_MIME = "application/vnd.cellmate.chart+json"
COLUMNS_MIME = "application/vnd.cellmate.columns+json"

MAX_POINTS = 1_000
"""Points kept per line or scatter: more are sampled evenly, first and last kept."""
MAX_CHART_POINTS = 10_000
"""Points kept in one chart, all elements together (a superchart's too)."""
MAX_ELEMENTS = 50
"""Lines, scatters, bars, slices or boxes kept per axes."""
MAX_AXES = 20
MAX_TICKS = 50
MAX_TEXT = 200
"""Characters kept of a title, axis label, element label or cell string."""
MAX_ROWS = 1_000
MAX_COLUMNS = 200
MAX_COLUMNS_BYTES = 512 * 1024

_UNIT = re.compile(r"[(\[]([^()\[\]]+)[)\]]")
_MATH = re.compile(r"\\mathdefault\{(.*)\}")


# ---- values ------------------------------------------------------------------------------


def text(value: Any) -> str | None:
    """A label as E2B gives it: None when empty, or matplotlib's private `_` labels."""
    if value is None:
        return None
    found = str(value).strip()
    if not found or found.startswith("_"):
        return None
    return found[:MAX_TEXT]


def unit(label: str | None) -> str | None:
    """The unit in a label's last brackets: "Time (s)" -> "s", "Size [MB]" -> "MB"."""
    if not label:
        return None
    found = _UNIT.findall(label)
    return found[-1].strip() or None if found else None


def number(value: Any) -> float | None:
    """A finite float, or None (NaN, infinities, what is not a number)."""
    try:
        found = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return found if math.isfinite(found) else None


def plain(value: Any) -> Any:
    """A cell's value as JSON: numbers (NaN -> None), text, ISO times, else its str()."""
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas' missing values
        return None
    if value is None or isinstance(value, bool | str):
        return value if not isinstance(value, str) else value[: MAX_TEXT * 5]
    if isinstance(value, int):
        return value if abs(value) < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return str(isoformat())
    item = getattr(value, "item", None)  # numpy's scalars
    if callable(item) and type(value).__module__ == "numpy":
        found = item()
        if found is not value and not hasattr(found, "item"):
            return plain(found)
    if isinstance(value, bytes):
        return value[:MAX_TEXT].hex()
    return str(value)[: MAX_TEXT * 5]


def sample(count: int, limit: int) -> list[int]:
    """`limit` indices of `count` items, evenly spread, the first and the last among them."""
    if count <= limit:
        return list(range(count))
    if limit <= 1:
        return [0][:limit]
    step = (count - 1) / (limit - 1)
    return [round(i * step) for i in range(limit)]


def tick_text(label: str) -> str:
    """A tick label without the mathtext around it: "$\\mathdefault{10^{2}}$" -> "10^{2}"."""
    found = label.strip("$")
    match = _MATH.fullmatch(found)
    return (match.group(1) if match else found).replace("\u2212", "-")


class Budget:
    """What is left of a chart's points, shared by its elements."""

    def __init__(self, points: int = MAX_CHART_POINTS) -> None:
        self.points = points
        self.cut = False

    def take(self, count: int) -> int:
        kept = max(min(count, MAX_POINTS, self.points), min(count, 2))
        self.points -= kept
        if kept < count:
            self.cut = True
        return kept


# ---- axes --------------------------------------------------------------------------------


def _module(name: str) -> Any:
    return importlib.import_module(name)


def scale(axis: Any) -> str:
    """E2B's scale: datetime and categorical for such units, else matplotlib's scale name."""
    kind = _units_kind(axis)
    if kind is not None:
        return kind
    return str(axis.get_scale())


def _units_kind(axis: Any) -> str | None:
    getter = getattr(axis, "get_converter", None)
    converter = getter() if callable(getter) else getattr(axis, "converter", None)
    if converter is None:
        return None
    where = type(converter).__module__
    if where == "matplotlib.category":
        return "categorical"
    if where == "matplotlib.dates" or where.startswith("pandas"):
        return "datetime"
    return None


def _value_reader(axis: Any) -> Any:
    """How a coordinate on this axis is given: datetimes as ISO text, categories by name,
    numbers as floats (None when not finite)."""
    kind = _units_kind(axis)
    if kind == "categorical":
        names = {}
        units = getattr(axis, "units", None)
        for name, index in dict(getattr(units, "_mapping", {}) or {}).items():
            names[round(float(index))] = str(name)

        def category(value: Any) -> Any:
            found = number(value)
            if found is None:
                return None
            return names.get(round(found), found)

        return category
    if kind == "datetime":
        formatter = axis.get_major_formatter()
        freq = getattr(formatter, "freq", None)
        if type(formatter).__module__.startswith("pandas") and freq is not None:
            pandas = _module("pandas")

            def period(value: Any) -> Any:
                found = number(value)
                if found is None:
                    return None
                stamp = pandas.Period(ordinal=round(found), freq=freq).to_timestamp()
                return str(stamp.isoformat())

            return period
        dates = _module("matplotlib.dates")

        def date(value: Any) -> Any:
            found = number(value)
            if found is None:
                return None
            when = dates.num2date(found)
            if when.tzinfo is not None and when.utcoffset() == datetime.timedelta(0):
                when = when.replace(tzinfo=None)
            return str(when.isoformat())

        return date
    return number


def _ticks(axis: Any, limits: Sequence[float]) -> tuple[list[Any], list[str]]:
    low, high = sorted(float(v) for v in limits)
    read = _value_reader(axis)
    locations = [float(v) for v in axis.get_majorticklocs()]
    labels = [tick_text(t.get_text()) for t in axis.get_majorticklabels()]
    ticks: list[Any] = []
    texts: list[str] = []
    span = (high - low) * 1e-9
    for location, label in zip(locations, labels, strict=False):
        if low - span <= location <= high + span:
            ticks.append(read(float(f"{location:.12g}")))
            texts.append(label)
    return ticks[:MAX_TICKS], texts[:MAX_TICKS]


def _tick_names(axis: Any) -> dict[float, str]:
    locations = [float(v) for v in axis.get_majorticklocs()]
    labels = [tick_text(t.get_text()) for t in axis.get_majorticklabels()]
    return {round(location, 9): label for location, label in zip(locations, labels, strict=False)}


def _title(ax: Any) -> str | None:
    for where in ("center", "left", "right"):
        found = text(ax.get_title(where))
        if found:
            return found
    return None


def _frame(ax: Any, kind: str) -> dict[str, Any]:
    x_label, y_label = text(ax.get_xlabel()), text(ax.get_ylabel())
    return {
        "type": kind,
        "title": _title(ax),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": unit(x_label),
        "y_unit": unit(y_label),
        "elements": [],
    }


def _axes_frame(ax: Any, kind: str) -> dict[str, Any]:
    chart = _frame(ax, kind)
    x_ticks, x_tick_labels = _ticks(ax.xaxis, ax.get_xlim())
    y_ticks, y_tick_labels = _ticks(ax.yaxis, ax.get_ylim())
    chart.update(
        x_scale=scale(ax.xaxis),
        y_scale=scale(ax.yaxis),
        x_ticks=x_ticks,
        x_tick_labels=x_tick_labels,
        y_ticks=y_ticks,
        y_tick_labels=y_tick_labels,
    )
    return chart


def _data_lines(ax: Any) -> list[Any]:
    """The axes' lines in data coordinates (not axhline and the like), visible ones."""
    found = []
    for line in ax.lines:
        if not line.get_visible():
            continue
        try:
            if not line.get_transform().contains_branch(ax.transData):
                continue
        except (AttributeError, ValueError):
            pass
        found.append(line)
    return found


def _points(
    xs: Sequence[Any], ys: Sequence[Any], ax: Any, budget: Budget
) -> tuple[list[list[Any]], int]:
    count = min(len(xs), len(ys))
    keep = sample(count, budget.take(count))
    read_x = _named(ax.xaxis, [xs[i] for i in keep]) or _value_reader(ax.xaxis)
    read_y = _named(ax.yaxis, [ys[i] for i in keep]) or _value_reader(ax.yaxis)
    return [[read_x(xs[i]), read_y(ys[i])] for i in keep], count


def _named(axis: Any, values: list[Any]) -> Any:
    """For an axis whose ticks were given text labels (`set_xticks(positions, labels)`, as
    pandas does for a column of text), the labels for these values when every value sits
    on a labelled tick; else None."""
    if _units_kind(axis) is not None or not values:
        return None
    ticker = _module("matplotlib.ticker")
    if not isinstance(axis.get_major_formatter(), ticker.FuncFormatter | ticker.FixedFormatter):
        return None
    names = {where: name for where, name in _tick_names(axis).items() if name}
    if not names or all(number(name.replace(",", "")) is not None for name in names.values()):
        return None
    for value in values:
        found = number(value)
        if found is None or round(found, 9) not in names:
            return None
    return lambda value: names[round(float(value), 9)]


def _point_element(label: Any, points: list[list[Any]], count: int) -> dict[str, Any]:
    element: dict[str, Any] = {"label": text(label) or "", "points": points}
    if len(points) < count:
        element["truncated"] = True
        element["total_points"] = count
    return element


# ---- chart kinds -------------------------------------------------------------------------


def _pie(ax: Any, wedges: list[Any]) -> dict[str, Any]:
    chart = _frame(ax, "pie")
    for wedge in wedges[:MAX_ELEMENTS]:
        chart["elements"].append(
            {
                "label": text(wedge.get_label()) or "",
                "angle": round(float(wedge.theta2 - wedge.theta1), 6),
                "radius": round(float(wedge.r), 6),
            }
        )
    if len(wedges) > MAX_ELEMENTS:
        chart["truncated"] = True
    return chart


def _bars(ax: Any, containers: list[Any]) -> dict[str, Any]:
    chart = _frame(ax, "bar")
    horizontal = all(getattr(c, "orientation", "vertical") == "horizontal" for c in containers)
    axis = ax.yaxis if horizontal else ax.xaxis
    names = _tick_names(axis)
    read = _value_reader(axis)
    elements = chart["elements"]
    total = 0
    for container in containers:
        group = text(container.get_label()) or ""
        for bar in container.patches:
            total += 1
            if len(elements) >= MAX_POINTS:
                continue
            if horizontal:
                where = bar.get_y() + bar.get_height() / 2
                value = bar.get_width()
            else:
                where = bar.get_x() + bar.get_width() / 2
                value = bar.get_height()
            label = names.get(round(float(where), 9))
            if label is None:
                found = read(where)
                label = found if isinstance(found, str) else "" if found is None else f"{found:g}"
            elements.append({"label": label, "group": group, "value": number(value)})
    if total > len(elements):
        chart["truncated"] = True
    chart["x_scale"], chart["y_scale"] = scale(ax.xaxis), scale(ax.yaxis)
    return chart


def _rectangle(corners: Iterable[Sequence[float]]) -> tuple[float, float, float, float] | None:
    """(x0, x1, y0, y1) of an axis-aligned outline (a box of a box plot), or None."""
    points = [(float(x), float(y)) for x, y in corners]
    if len(points) < 4:
        return None
    xs, ys = {round(x, 9) for x, _ in points}, {round(y, 9) for _, y in points}
    if len(xs) < 2 or len(ys) < 2:
        return None
    if len(points) >= 11:
        # A notched box (matplotlib's outline: the quartiles at its first and sixth
        # corners), whose notch may reach past the quartiles.
        (ax, ay), (bx, by), (_, _), (_, _), (_, _), (fx, fy) = points[:6]
        if ay == by:
            return min(xs), max(xs), min(ay, fy), max(ay, fy)
        if ax == bx:
            return min(ax, fx), max(ax, fx), min(ys), max(ys)
        return None
    return min(xs), max(xs), min(ys), max(ys)


def _boxes(ax: Any, lines: list[Any]) -> tuple[list[dict[str, Any]], set[int]] | None:
    """The boxes of box plots on these axes (vertical or horizontal), and the lines they
    are drawn with; None when there are none."""
    outlines: list[tuple[Any, tuple[float, float, float, float]]] = []
    for line in lines:
        xy = line.get_xydata()
        if len(xy) in (5, 11) and tuple(xy[0]) == tuple(xy[-1]):
            box = _rectangle(xy)
            if box:
                outlines.append((line, box))
    path_patch = _module("matplotlib.patches").PathPatch
    for patch in ax.patches:
        if isinstance(patch, path_patch):
            vertices = patch.get_path().vertices
            box = _rectangle(vertices)
            if box and len(vertices) in (5, 6, 11, 12):
                outlines.append((patch, box))
    if not outlines:
        return None
    used: set[int] = {id(artist) for artist, _ in outlines}
    segments = []
    for line in lines:
        xy = line.get_xydata()
        if len(xy) == 2 and id(line) not in used:
            segments.append((line, [(float(x), float(y)) for x, y in xy]))
    flier_lines = [
        line
        for line in lines
        if id(line) not in used and line.get_linestyle() in ("None", "", " ", "none")
    ]
    boxes = []
    for _, (x0, x1, y0, y1) in outlines:
        found = _box(segments, flier_lines, x0, x1, y0, y1, vertical=True, used=used)
        if found is None:
            found = _box(segments, flier_lines, y0, y1, x0, x1, vertical=False, used=used)
        if found is None:
            return None
        boxes.append(found)
    return boxes, used


def _box(
    segments: list[tuple[Any, list[tuple[float, float]]]],
    fliers: list[Any],
    w0: float,
    w1: float,
    q1: float,
    q3: float,
    *,
    vertical: bool,
    used: set[int],
) -> dict[str, Any] | None:
    """One box: the median across it, the whiskers from its middle, the fliers in line."""
    middle = (w0 + w1) / 2
    tolerance = max(abs(w1 - w0), abs(q3 - q1), 1e-12) * 1e-6

    def along(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        return points if vertical else [(y, x) for x, y in points]

    # Across the box: the median, and a cap where a whisker has no length. The median is
    # the widest of them, and of equals (a notched box's) the last drawn.
    across: list[tuple[float, int, float, Any]] = []
    low = high = None
    for order, (line, raw) in enumerate(segments):
        (a, va), (b, vb) = along(raw)
        if (
            abs(va - vb) <= tolerance
            and q1 - tolerance <= va <= q3 + tolerance
            and min(a, b) >= w0 - tolerance
            and max(a, b) <= w1 + tolerance
            and abs(b - a) > tolerance
        ):
            across.append((round(abs(b - a), 9), order, va, line))
        elif abs(a - middle) <= tolerance and abs(b - middle) <= tolerance:
            ends = sorted((va, vb))
            if abs(ends[1] - q1) <= tolerance and ends[0] <= q1:
                low = ends[0]
                used.add(id(line))
            elif abs(ends[0] - q3) <= tolerance and ends[1] >= q3:
                high = ends[1]
                used.add(id(line))
    if not across:
        return None
    _, _, median, line = max(across, key=lambda found: found[:2])
    used.add(id(line))
    outliers: list[float] = []
    for line in fliers:
        points = along([(float(x), float(y)) for x, y in line.get_xydata()])
        if points and all(abs(a - middle) <= tolerance for a, _ in points):
            outliers.extend(v for _, v in points)
            used.add(id(line))
    return {
        "position": middle,
        "min": number(low if low is not None else q1),
        "first_quartile": number(q1),
        "median": number(median),
        "third_quartile": number(q3),
        "max": number(high if high is not None else q3),
        "outliers": [number(v) for v in sorted(outliers)[:MAX_POINTS]],
        "vertical": vertical,
    }


def _box_chart(ax: Any, boxes: list[dict[str, Any]]) -> dict[str, Any]:
    chart = _frame(ax, "box_and_whisker")
    vertical = all(box["vertical"] for box in boxes)
    names = _tick_names(ax.xaxis if vertical else ax.yaxis)
    for box in boxes[:MAX_ELEMENTS]:
        where = box.pop("position")
        box.pop("vertical")
        box["label"] = names.get(round(where, 9)) or f"{where:g}"
        chart["elements"].append(box)
    if len(boxes) > MAX_ELEMENTS:
        chart["truncated"] = True
    return chart


def axes_chart(ax: Any, budget: Budget) -> dict[str, Any]:
    """One axes as a chart: pie, box and whisker, bar, scatter, line, or unknown."""
    wedge = _module("matplotlib.patches").Wedge
    wedges = [p for p in ax.patches if isinstance(p, wedge) and p.get_visible()]
    lines = _data_lines(ax)
    path_collection = _module("matplotlib.collections").PathCollection
    scatters = [
        c
        for c in ax.collections
        if isinstance(c, path_collection) and c.get_visible() and len(c.get_offsets())
    ]
    if wedges and not lines and not scatters:
        return _pie(ax, wedges)
    boxes = _boxes(ax, lines)
    if boxes is not None:
        return _box_chart(ax, boxes[0])
    bar_container = _module("matplotlib.container").BarContainer
    containers = [c for c in ax.containers if isinstance(c, bar_container)]
    if containers and not scatters:
        return _bars(ax, containers)
    if not lines and not scatters:
        return _axes_frame(ax, "unknown")
    chart = _axes_frame(ax, "scatter" if scatters else "line")
    series: list[tuple[Any, Any, bool]] = [
        (c.get_label(), c.get_offsets(), False) for c in scatters
    ]
    series += [(line.get_label(), line, True) for line in lines]
    if len(series) > MAX_ELEMENTS:
        del series[MAX_ELEMENTS:]
        chart["truncated"] = True
    for label, data, is_line in series:
        if is_line:
            xs, ys = data.get_xdata(orig=False), data.get_ydata(orig=False)
        else:
            xs, ys = data[:, 0], data[:, 1]
        if min(len(xs), len(ys)):  # not the empty stand-ins some libraries add for legends
            chart["elements"].append(_point_element(label, *_points(xs, ys, ax, budget)))
    return chart


def figure_chart(figure: Any) -> dict[str, Any]:
    """The figure as one chart, or a superchart of one chart per axes (colorbars left out)."""
    axes = [ax for ax in figure.get_axes() if ax.get_visible() and ax.get_label() != "<colorbar>"]
    suptitle = figure.get_suptitle() if hasattr(figure, "get_suptitle") else ""
    budget = Budget()
    if len(axes) == 1:
        chart = axes_chart(axes[0], budget)
        if chart["title"] is None:
            chart["title"] = text(suptitle)
    elif not axes:
        chart = {"type": "unknown", "title": text(suptitle), "elements": []}
    else:
        chart = {
            "type": "superchart",
            "title": text(suptitle),
            "elements": [axes_chart(ax, budget) for ax in axes[:MAX_AXES]],
        }
        if len(axes) > MAX_AXES:
            chart["truncated"] = True
        if any(part.get("truncated") for part in chart["elements"]):
            chart["truncated"] = True
    if budget.cut or any(e.get("truncated") for e in chart["elements"]):
        chart["truncated"] = True
    return chart


# ---- DataFrames --------------------------------------------------------------------------


def frame_columns(frame: Any) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The frame's columns (`{name: [values]}`, the index left out, as E2B gives them) and
    the metadata beside them: how many rows and columns the frame has, and whether they
    were cut (at most MAX_ROWS rows, MAX_COLUMNS columns and MAX_COLUMNS_BYTES of JSON)."""
    rows, width = frame.shape
    kept_rows = min(rows, MAX_ROWS)
    kept_width = min(width, MAX_COLUMNS)
    while True:
        columns: dict[str, list[Any]] = {}
        for position in range(kept_width):
            name = plain(frame.columns[position])
            key = name if isinstance(name, str) else json.dumps(name)
            if isinstance(frame.columns[position], tuple):
                key = ", ".join(str(part) for part in frame.columns[position])
            while key in columns:
                key += "'"
            values = frame.iloc[:kept_rows, position].tolist()
            columns[key] = [plain(value) for value in values]
        size = len(json.dumps(columns, ensure_ascii=False, allow_nan=False).encode())
        if size <= MAX_COLUMNS_BYTES or kept_rows <= 1:
            break
        kept_rows = max(int(kept_rows * MAX_COLUMNS_BYTES / size * 0.9), 1)
    metadata: dict[str, Any] = {"rows": rows, "columns": width}
    if kept_rows < rows or kept_width < width:
        metadata.update(truncated=True, rows_kept=kept_rows, columns_kept=kept_width)
    return columns, metadata
