"""What changed between two runs of a schedule: the numbers that moved (line by line, where
the same line, numbers aside, appears in both outputs), the lines that came or went, and the
previous run's charts beside the new ones."""

from __future__ import annotations

import re
from collections.abc import Sequence

NUMBER = re.compile(r"-?\d[\d,_]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
SHOWN_MOVES = 8
LABEL_CHARS = 48


def changes(
    before: str,
    after: str,
    charts_before: Sequence[tuple[str, str]],
    charts_after: Sequence[tuple[str, str]],
) -> str:
    """The "what changed since last time" note of a run whose output is `after`."""
    lines_before = _lines(before)
    lines_after = _lines(after)
    by_shape: dict[str, list[str]] = {}
    for line in lines_before:
        by_shape.setdefault(NUMBER.sub("#", line), []).append(line)
    moves: list[str] = []
    same = 0
    new = 0
    for line in lines_after:
        earlier = by_shape.get(NUMBER.sub("#", line))
        if not earlier:
            new += 1
            continue
        previous = earlier.pop(0)
        moved = _moved(previous, line)
        if moved:
            moves.append(moved)
        else:
            same += 1
    gone = sum(len(left) for left in by_shape.values())
    parts: list[str] = []
    if moves:
        shown = moves[:SHOWN_MOVES]
        more = f"; and {len(moves) - len(shown)} more" if len(moves) > len(shown) else ""
        parts.append("Numbers that moved: " + "; ".join(shown) + more + ".")
    if new or gone:
        parts.append(f"Lines new this time: {new}; lines gone since: {gone}.")
    if not moves and not new and not gone:
        parts.append("The output is the same as last time.")
    if charts_before and charts_after:
        previous = ", ".join(f"{name} <{link}>" for name, link in charts_before if link)
        if previous:
            parts.append(f"The previous chart, beside this one: {previous}")
    return " ".join(parts)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _moved(before: str, after: str) -> str:
    old = NUMBER.findall(before)
    new = NUMBER.findall(after)
    if old == new:
        return ""
    label = NUMBER.sub("", after).strip(" :=|,\t") or "value"
    label = label[:LABEL_CHARS]
    steps = [_step(a, b) for a, b in zip(old, new, strict=False) if a != b]
    return f"{label}: " + ", ".join(steps)


def _step(before: str, after: str) -> str:
    try:
        a = float(before.replace(",", "").replace("_", ""))
        b = float(after.replace(",", "").replace("_", ""))
    except ValueError:
        return f"{before} → {after}"
    delta = b - a
    sign = "+" if delta >= 0 else "−"
    change = f"{sign}{_number(abs(delta))}"
    if a:
        change += f", {sign}{abs(delta) / abs(a):.1%}"
    return f"{before} → {after} ({change})"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.4g}"
