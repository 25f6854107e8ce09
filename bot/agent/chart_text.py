"""A chart's data as a few lines the model can reason with: what it plotted, and the
numbers (a few points, or the count and the ranges), without the picture."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SUMMARY_CHARS = 600
"""The most a chart's summary takes in a tool result (a superchart's parts share it)."""
FEW_POINTS = 6
"""Elements with at most this many points are listed in full; longer ones are summarised."""
FEW_ITEMS = 12
"""Bars, slices and boxes listed before the rest are only counted."""


def chart_summary(chart: Mapping[str, Any], limit: int = SUMMARY_CHARS) -> str:
    """One chart (E2B's shape) in at most `limit` characters."""
    if chart.get("type") == "superchart":
        parts = [_part(sub) for sub in _mappings(chart.get("elements"))]
        head = f"{len(parts)} charts" + _titled(chart)
        text = head + "".join(f"\n[{i}] {part}" for i, part in enumerate(parts, start=1))
    else:
        text = _part(chart)
    if chart.get("truncated"):
        text += "\n(the chart data was cut: more points were plotted than it holds)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _part(chart: Mapping[str, Any]) -> str:
    kind = str(chart.get("type") or "unknown")
    lines = [kind + _titled(chart) + _axes(chart)]
    elements = _mappings(chart.get("elements"))
    if kind in ("line", "scatter"):
        lines += [_points(element, chart) for element in elements[:FEW_ITEMS]]
    elif kind == "bar":
        lines.append(_listed([_bar(element) for element in elements]))
    elif kind == "pie":
        lines.append(_listed([_slice(element) for element in elements]))
    elif kind == "box_and_whisker":
        lines += [_box(element) for element in elements[:FEW_ITEMS]]
    if len(elements) > FEW_ITEMS and kind not in ("bar", "pie"):
        lines.append(f"... {len(elements) - FEW_ITEMS} more")
    return "\n".join(line for line in lines if line)


def _titled(chart: Mapping[str, Any]) -> str:
    title = chart.get("title")
    return f' "{title}"' if title else ""


def _axes(chart: Mapping[str, Any]) -> str:
    said = []
    for axis in ("x", "y"):
        label = chart.get(f"{axis}_label")
        scale = chart.get(f"{axis}_scale")
        scaled = scale not in (None, "linear")
        if label:
            said.append(f"{axis}: {label}" + (f" ({scale})" if scaled else ""))
        elif scaled:
            said.append(f"{axis}: {scale}")
    return "; " + ", ".join(said) if said else ""


def _points(element: Mapping[str, Any], chart: Mapping[str, Any]) -> str:
    points = [p for p in element.get("points") or () if isinstance(p, Sequence) and len(p) == 2]
    name = element.get("label") or "(unlabelled)"
    total = element.get("total_points") or len(points)
    if len(points) <= FEW_POINTS:
        return f"{name}: " + ", ".join(f"({_value(x)}, {_value(y)})" for x, y in points)
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    said = f"{name}: {total:,} points, x {_range(xs)}, y {_range(ys)}"
    return (
        said
        + f"; first ({_value(xs[0])}, {_value(ys[0])}), last ({_value(xs[-1])}, {_value(ys[-1])})"
    )


def _bar(element: Mapping[str, Any]) -> str:
    group = element.get("group")
    label = element.get("label") or ""
    return f"{label}{f' [{group}]' if group else ''} = {_value(element.get('value'))}"


def _slice(element: Mapping[str, Any]) -> str:
    angle = element.get("angle")
    share = f"{angle / 360:.1%}" if isinstance(angle, int | float) else "?"
    return f"{element.get('label') or '(unlabelled)'} {share}"


def _box(element: Mapping[str, Any]) -> str:
    numbers = ", ".join(
        f"{name} {_value(element.get(key))}"
        for name, key in (
            ("min", "min"),
            ("q1", "first_quartile"),
            ("median", "median"),
            ("q3", "third_quartile"),
            ("max", "max"),
        )
    )
    outliers = element.get("outliers") or []
    extra = f", {len(outliers)} outliers" if outliers else ""
    return f"{element.get('label') or '(unlabelled)'}: {numbers}{extra}"


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:FEW_ITEMS])
    return shown + (f"; ... {len(items) - FEW_ITEMS} more" if len(items) > FEW_ITEMS else "")


def _range(values: list[Any]) -> str:
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len([v for v in values if v is not None]):
        return f"{_value(min(numbers))}..{_value(max(numbers))}"
    texts = [str(v) for v in values if v is not None]
    if not texts:
        return "?"
    if all(isinstance(v, str) for v in values if v is not None):
        return f"{_value(texts[0])}..{_value(texts[-1])}"
    return "mixed"


def _value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int | float):
        return f"{value:.4g}"
    return str(value).removesuffix("T00:00:00")[:40]  # a date, not a midnight


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, Mapping)]
