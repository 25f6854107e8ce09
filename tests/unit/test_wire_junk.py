"""What the host makes of events a misbehaving runner could send: every declared event with
each field swapped for a value of another type decodes to None or to the declared types,
never to an exception; and sealed lines whose number is not a plain rising decimal count
for nothing."""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing

import pytest

from executor import wire
from executor.wire.messages import EVENTS
from executor.wire.sealing import seal, unseal

KEY = bytes(range(32))
WRONG: list[object] = [
    None,
    True,
    -1,
    2**80,
    1.5,
    float("nan"),
    "x" * 10_000,
    [],
    [1, "a"],
    {},
    {"a": [None]},
]


def _annotation_allows(kind: type, name: str, value: object) -> bool:
    hint = typing.get_type_hints(kind)[name]
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        return any(_matches(arg, value) for arg in typing.get_args(hint))
    return _matches(hint, value)


def _matches(hint: object, value: object) -> bool:
    origin = typing.get_origin(hint) or hint
    if hint is type(None):
        return value is None
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (str, bool, float):
        return isinstance(value, origin)  # type: ignore[arg-type]
    if origin is tuple:
        return isinstance(value, tuple)
    return True  # mappings and nested declarations: their own readers bound them


@pytest.mark.parametrize(
    "kind", sorted(EVENTS.values(), key=lambda k: k.type), ids=lambda k: k.type
)
def test_every_field_of_every_event_survives_a_value_of_the_wrong_type(kind: type) -> None:
    for field in dataclasses.fields(kind):
        for bad in WRONG:
            event = wire.decode_event({"type": kind.type, "id": "r1", field.name: bad})
            if event is None:
                continue
            assert isinstance(event, kind)
            for checked in dataclasses.fields(kind):
                value = getattr(event, checked.name)
                assert _annotation_allows(kind, checked.name, value), (
                    kind.type,
                    field.name,
                    bad,
                    checked.name,
                    value,
                )


@pytest.mark.parametrize(
    "head", [b"+5", b"-5", b"05", b"0x5", b"\xd9\xa5", b"1" * 21, b"", b"5.0", b"1e3", b"6"]
)
def test_a_sealed_line_counts_only_with_a_plain_rising_decimal_number(head: bytes) -> None:
    payload = b'{"type": "ready"}'
    good = seal(KEY, 5, payload)
    assert unseal(KEY, good, 4) == (5, payload)
    assert unseal(KEY, good, 5) is None  # a replay
    mac = good.split(b" ", 1)[0]
    # The runner's MAC with a number written any other way is not the runner's line.
    assert unseal(KEY, mac + b" " + head + b" " + payload + b"\n", 0) is None


def test_an_input_reply_longer_than_a_chat_box_is_refused_and_a_long_prompt_cut() -> None:
    reply = {"op": "input_reply", "id": "r", "value": "x" * (wire.MAX_INPUT_CHARS + 1)}
    with pytest.raises(wire.Malformed):
        wire.decode_request(wire.dumps(reply))
    given = wire.decode_request(wire.dumps({**reply, "value": "ok"}))
    assert given == wire.InputReply(id="r", value="ok", given=True)
    none = wire.decode_request(wire.dumps({"op": "input_reply", "id": "r", "given": False}))
    assert none == wire.InputReply(id="r", value="", given=False)
    asked = wire.decode_event({"type": "input_request", "id": "r", "prompt": "p" * 10**5})
    assert isinstance(asked, wire.InputRequest)
    assert len(asked.prompt) == wire.MAX_PROMPT_CHARS
    assert not asked.password


@pytest.mark.parametrize("elapsed", [2**80, 10**18, -(2**80), -1])
def test_a_followed_run_s_age_is_bounded_whatever_the_runner_claims(elapsed: int) -> None:
    event = wire.decode_event(
        {"type": "following", "id": "r", "found": True, "elapsed_ms": elapsed}
    )
    assert isinstance(event, wire.Following)
    assert 0 <= event.elapsed_ms <= 366 * 24 * 3600 * 1000
    datetime.timedelta(milliseconds=event.elapsed_ms)  # a duration the host can compute with
