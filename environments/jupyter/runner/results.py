"""A kernel's display marked as its cell's value, made the execute_result Python's kernel
sends for it. tslab prints a JavaScript or TypeScript cell's last value; in the image it
publishes it as a display marked `RESULT_MARK` instead (tslab_result.js), so that the host
gets every language's last value the same way: as the run's result, not as stdout."""

from __future__ import annotations

from typing import Any

RESULT_MARK = "cellmate/result"
"""The display's metadata key (tslab_result.js sets the same)."""


def as_result(msg: dict[str, Any]) -> dict[str, Any]:
    """`msg` as an execute_result if it is a display_data with the mark (which it loses),
    else `msg` itself. Its execution count is None: tslab says the count only in its reply,
    which comes after the value (the run's count reaches the host in its `Done`)."""
    content = msg.get("content")
    if msg.get("msg_type") != "display_data" or not isinstance(content, dict):
        return msg
    metadata = content.get("metadata")
    if not isinstance(metadata, dict) or metadata.get(RESULT_MARK) is not True:
        return msg
    return {
        **msg,
        "msg_type": "execute_result",
        "header": {**msg.get("header", {}), "msg_type": "execute_result"},
        "content": {
            "data": content.get("data", {}),
            "metadata": {key: value for key, value in metadata.items() if key != RESULT_MARK},
            "execution_count": None,
        },
    }
