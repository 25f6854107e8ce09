"""What every language's chart of 10,000 points must come back as: capped to 1,000 points,
ends kept, and small enough for a tool result."""

from __future__ import annotations

import json
from typing import Any


def assert_capped_line(chart: dict[str, Any]) -> None:
    """`chart` is one line of x = 0..9999, capped as runner/charts.py caps it."""
    (element,) = chart["elements"]
    assert chart["truncated"] is True
    assert element["truncated"] is True
    assert element["total_points"] == 10_000
    assert len(element["points"]) == 1_000
    assert element["points"][0] == [0, 0]
    assert element["points"][-1][0] == 9_999
    assert len(json.dumps(chart)) < 60_000
