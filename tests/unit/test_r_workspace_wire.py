"""R's variables in a workspace, on the wire: the snapshot's R fields and the restore's come
through the codec whole, and fields of the wrong type are read as nothing."""

from __future__ import annotations

from typing import Any

import pytest

from executor import wire
from executor.wire.sealing import dumps


def test_r_variables_round_trip_in_snapshot_restore_and_restored() -> None:
    taken = wire.SnapshotTaken(
        id="s",
        variables="cGlja2xl",
        saved=("x",),
        r_variables="UkRYMw==",
        r_saved=("df", "my.model"),
        r_skipped={"con": "an open connection"},
    )
    assert wire.decode_event(wire.encode(taken)) == taken
    restore = wire.Restore(id="r", variables="", cells=("x = 1",), r_variables="UkRYMw==")
    assert wire.decode_request(dumps(wire.encode(restore))) == restore
    restored = wire.Restored(id="r", r_restored=("df",), r_failed={"library(zoo)": "missing"})
    assert wire.decode_event(wire.encode(restored)) == restored


@pytest.mark.parametrize("junk", [1, "x", None, True, {"a": 1}])
def test_r_fields_of_the_wrong_type_are_read_as_nothing(junk: Any) -> None:
    body = {"type": "snapshot", "id": "s", "r_saved": junk, "r_skipped": junk}
    event = wire.decode_event(body)
    assert event is None or isinstance(event, wire.SnapshotTaken)
