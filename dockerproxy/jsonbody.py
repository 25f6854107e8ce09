"""Request bodies read the way the engine reads them, so that nothing hides from the checks.

The engine decodes JSON with Go's encoding/json: an object key matches a struct field whatever
its case, and when two keys match one field the last wins. A checker that reads keys by their
exact spelling sees one value while the engine uses another. Here a struct's keys are compared
without case, a key that appears twice (after folding) is refused, and so is any key that is
not plain ASCII letters (Go also folds some non-ASCII letters, such as the Kelvin sign, onto
ASCII ones). Whatever a builder does not take is refused, so an unknown field never passes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dockerproxy.errors import RequestRefused

STRUCT_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,63}$")
MAX_DEPTH = 8


class RawObject(list[tuple[str, Any]]):
    """A JSON object as its pairs, in order, duplicates kept, until a builder reads it."""


def decode(body: bytes) -> Struct:
    """The top-level object of a request body, as a struct."""
    try:
        text = body.decode("utf-8")
        found = json.loads(
            text, object_pairs_hook=RawObject, parse_constant=_no_constant, parse_float=_no_float
        )
    except UnicodeDecodeError:
        raise RequestRefused("the request body is not UTF-8") from None
    except RecursionError:
        raise RequestRefused("the request body is nested too deeply") from None
    except ValueError as exc:
        raise RequestRefused(f"the request body is not valid JSON ({exc})") from None
    return struct(found, "body")


class Struct:
    """A JSON object that stands for a Go struct."""

    def __init__(self, where: str, fields: dict[str, tuple[str, Any]]) -> None:
        self.where = where
        self._fields = fields

    def take(self, name: str) -> Any:
        """The value of field `name` (any case), or None when it is absent."""
        found = self._fields.pop(name.lower(), None)
        return None if found is None else found[1]

    def done(self) -> None:
        """Refuses whatever was not taken: a field the executor never sends."""
        if self._fields:
            names = ", ".join(sorted(spelled for spelled, _ in self._fields.values()))
            raise RequestRefused(f"{self.where}: {names} is not something the executor sends")


def struct(value: Any, where: str, depth: int = 0) -> Struct:
    if not isinstance(value, RawObject):
        raise RequestRefused(f"{where} must be a JSON object")
    if depth > MAX_DEPTH:
        raise RequestRefused(f"{where} is nested too deeply")
    fields: dict[str, tuple[str, Any]] = {}
    for key, item in value:
        if not STRUCT_KEY.match(key):
            raise RequestRefused(f"{where}: the field name {key!r} is not one the engine has")
        folded = key.lower()
        if folded in fields:
            raise RequestRefused(
                f"{where}: {fields[folded][0]!r} and {key!r} name the same field "
                "(the engine would take the last)"
            )
        fields[folded] = (key, item)
    return Struct(where, fields)


def string_map(value: Any, where: str) -> dict[str, str]:
    """A JSON object that stands for a Go map of strings: exact keys, each once."""
    if value is None:
        return {}
    if not isinstance(value, RawObject):
        raise RequestRefused(f"{where} must be a JSON object of strings")
    found: dict[str, str] = {}
    for key, item in value:
        if key in found:
            raise RequestRefused(f"{where}: {key!r} appears twice")
        if not isinstance(item, str):
            raise RequestRefused(f"{where}[{key!r}] must be a string")
        found[key] = item
    return found


def absent(value: Any, where: str) -> None:
    """A field the executor sends only empty (null, false, "", [] or {})."""
    if value not in (None, False, "", [], 0) and value != RawObject():
        raise RequestRefused(f"{where} is not allowed")


def boolean(value: Any, where: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestRefused(f"{where} must be true or false")
    return value


def integer(value: Any, where: str, low: int, high: int) -> int:
    # bool is an int in Python, but never a number in JSON.
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestRefused(f"{where} must be a whole number")
    if not low <= value <= high:
        raise RequestRefused(f"{where} must be between {low} and {high}, not {value}")
    return value


def text(value: Any, where: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise RequestRefused(f"{where} {value!r} is not allowed")
    return value


def strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestRefused(f"{where} must be a list of strings")
    return list(value)


def _no_constant(name: str) -> Any:
    raise RequestRefused(f"{name} is not a number the engine reads")


def _no_float(literal: str) -> Any:
    raise RequestRefused(f"{literal} is not a whole number")
