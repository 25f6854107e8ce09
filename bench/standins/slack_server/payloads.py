"""Web API arguments as Slack reads them, and Block Kit: ids, limits and view state."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from .world import APP_TOKEN, BOT_TOKEN, MAX_MESSAGE_BLOCKS, MAX_VIEW_BLOCKS, SlackError


def bearer_token(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def check_token(method: str, token: Any) -> None:
    if not token:
        raise SlackError("not_authed")
    if token not in (BOT_TOKEN, APP_TOKEN):
        raise SlackError("invalid_auth")
    # apps.connections.open takes only the app-level token, everything else only the bot's.
    if (token == APP_TOKEN) != (method == "apps.connections.open"):
        raise SlackError("not_allowed_token_type")


async def read_args(request: web.Request) -> dict[str, Any]:
    """A method's arguments from the query string and a form or JSON body, as Slack reads them."""
    args: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        with contextlib.suppress(json.JSONDecodeError):
            body = await request.json()
            if isinstance(body, dict):
                args.update(body)
    elif request.method == "POST":
        form = await request.post()
        for key, value in form.items():
            args[key] = value.file.read() if isinstance(value, web.FileField) else value
    return args


def decode_json_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """Form posts carry structured arguments as JSON strings; decode the ones that parse."""
    decoded = dict(args)
    for key in ("blocks", "attachments", "view", "files", "metadata"):
        if isinstance(decoded.get(key), str):
            with contextlib.suppress(json.JSONDecodeError):
                decoded[key] = json.loads(decoded[key])
    return decoded


def flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() in ("1", "true")


def opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def json_arg(value: Any, name: str) -> Any:
    """An argument that form posts carry as a JSON string and JSON posts as a value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise SlackError("invalid_json", argument=name) from None
    if value is None:
        raise SlackError("invalid_arguments", argument=name)
    return value


def message_blocks(value: Any) -> list[dict[str, Any]]:
    if value in (None, ""):
        return []
    try:
        blocks = json_arg(value, "blocks")
    except SlackError:
        raise SlackError("invalid_blocks_format") from None
    problems = block_problems(blocks, limit=MAX_MESSAGE_BLOCKS, pointer="/blocks")
    if problems:
        raise SlackError(
            "invalid_blocks",
            errors=[p.removeprefix("[ERROR] ") for p in problems],
            response_metadata={"messages": problems},
        )
    return with_ids(blocks)


def with_ids(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks as Slack stores them: every block and interactive element gets an id."""
    stored: list[dict[str, Any]] = json.loads(json.dumps(blocks))
    for block in stored:
        block.setdefault("block_id", secrets.token_urlsafe(3))
        for element in interactive_elements(block):
            element.setdefault("action_id", secrets.token_urlsafe(4))
    return stored


def interactive_elements(block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if block.get("type") == "actions":
        yield from (e for e in block.get("elements", []) if isinstance(e, dict))
    for key in ("accessory", "element"):
        if isinstance(block.get(key), dict):
            yield block[key]


def find_element(blocks: list[dict[str, Any]], action_id: str) -> tuple[str, dict[str, Any]] | None:
    for block in blocks:
        for element in interactive_elements(block):
            if element.get("action_id") == action_id:
                return block["block_id"], element
    return None


def action_ids_in(blocks: list[dict[str, Any]]) -> set[str]:
    return {e.get("action_id", "") for b in blocks for e in interactive_elements(b)}


def rich_text(text: str) -> list[dict[str, Any]]:
    """The rich_text block Slack's clients attach to what a person types."""
    elements: list[dict[str, Any]] = []
    for i, piece in enumerate(re.split(r"<@([UW][A-Z0-9]+)>", text)):
        if i % 2:
            elements.append({"type": "user", "user_id": piece})
        elif piece:
            elements.append({"type": "text", "text": piece})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": secrets.token_urlsafe(3), "elements": [section]}]


def view_state(view: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """`state.values` of a submitted modal: block_id -> action_id -> element state."""
    inputs = [
        (block, block["element"])
        for block in view.get("blocks", [])
        if block.get("type") == "input" and isinstance(block.get("element"), dict)
    ]
    known = {element["action_id"] for _, element in inputs}
    if unknown := set(values) - known:
        raise AssertionError(f"the view has no inputs {sorted(unknown)}; it has {sorted(known)}")
    state: dict[str, Any] = {}
    for block, element in inputs:
        action_id = element["action_id"]
        value = values.get(action_id)
        if value is None and not block.get("optional"):
            # Slack's client refuses to submit a modal with an empty required input.
            raise AssertionError(f"required input {action_id!r} has no value")
        state[block["block_id"]] = {action_id: {"type": element.get("type"), "value": value}}
    return state


def text_of(obj: Any) -> str:
    return str(obj.get("text", "")) if isinstance(obj, dict) else ""


def view_problems(view: Any) -> list[str]:
    """What Slack's views.* methods reject, as `response_metadata.messages`."""
    if not isinstance(view, dict):
        return ["[ERROR] must be an object [json-pointer:/view]"]
    problems = []
    if view.get("type") not in ("modal", "home"):
        problems.append("[ERROR] must be one of modal, home [json-pointer:/view/type]")
    if view.get("type") == "modal":
        title = text_of(view.get("title"))
        if not title:
            problems.append("[ERROR] missing required field: title [json-pointer:/view]")
        for key in ("title", "submit", "close"):
            if len(text_of(view.get(key))) > 24:
                problems.append(
                    f"[ERROR] must be less than 25 characters [json-pointer:/view/{key}/text]"
                )
        has_inputs = any(
            b.get("type") == "input" for b in view.get("blocks", []) if isinstance(b, dict)
        )
        if has_inputs and not view.get("submit"):
            problems.append(
                "[ERROR] must provide a submit property when using input blocks"
                " [json-pointer:/view]"
            )
    if len(str(view.get("private_metadata") or "")) > 3000:
        problems.append(
            "[ERROR] must be less than 3001 characters [json-pointer:/view/private_metadata]"
        )
    if len(str(view.get("callback_id") or "")) > 255:
        problems.append("[ERROR] must be less than 256 characters [json-pointer:/view/callback_id]")
    return problems + block_problems(
        view.get("blocks", []), limit=MAX_VIEW_BLOCKS, pointer="/view/blocks"
    )


def block_problems(blocks: Any, *, limit: int, pointer: str) -> list[str]:
    """Block Kit limits that Slack enforces, phrased as Slack phrases them."""
    if not isinstance(blocks, list):
        return [f"[ERROR] must be an array [json-pointer:{pointer}]"]
    problems = []
    if len(blocks) > limit:
        problems.append(f"[ERROR] no more than {limit} items allowed [json-pointer:{pointer}]")
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        at = f"{pointer}/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"[ERROR] missing required field: type [json-pointer:{at}]")
            continue
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in block_ids:
                problems.append(f"[ERROR] duplicate block_id [json-pointer:{at}/block_id]")
            block_ids.add(block_id)
        problems += one_block_problems(block, at)
    return problems


def too_long(value: str, limit: int, at: str) -> list[str]:
    if len(value) > limit:
        return [f"[ERROR] must be less than {limit + 1} characters [json-pointer:{at}]"]
    return []


def one_block_problems(block: dict[str, Any], at: str) -> list[str]:
    kind = block["type"]
    problems = too_long(str(block.get("block_id") or ""), 255, f"{at}/block_id")
    if kind == "section":
        if not block.get("text") and not block.get("fields"):
            problems.append(f"[ERROR] must provide either text or fields [json-pointer:{at}]")
        problems += too_long(text_of(block.get("text")), 3000, f"{at}/text/text")
        fields = block.get("fields") or []
        if len(fields) > 10:
            problems.append(f"[ERROR] no more than 10 items allowed [json-pointer:{at}/fields]")
        for j, f in enumerate(fields):
            problems += too_long(text_of(f), 2000, f"{at}/fields/{j}/text")
    elif kind == "header":
        problems += too_long(text_of(block.get("text")), 150, f"{at}/text/text")
    elif kind == "context":
        if not 1 <= len(block.get("elements") or []) <= 10:
            problems.append(f"[ERROR] must have 1 to 10 items [json-pointer:{at}/elements]")
    elif kind == "actions":
        if not 1 <= len(block.get("elements") or []) <= 25:
            problems.append(f"[ERROR] must have 1 to 25 items [json-pointer:{at}/elements]")
    elif kind == "input":
        if not isinstance(block.get("element"), dict):
            problems.append(f"[ERROR] missing required field: element [json-pointer:{at}]")
        problems += too_long(text_of(block.get("label")), 2000, f"{at}/label/text")
    elif kind == "markdown":
        problems += too_long(str(block.get("text") or ""), 12000, f"{at}/text")
    action_ids: set[str] = set()
    for element in interactive_elements(block):
        action_id = str(element.get("action_id") or "")
        if action_id and action_id in action_ids:
            problems.append(f"[ERROR] duplicate action_id {action_id!r} [json-pointer:{at}]")
        action_ids.add(action_id)
        problems += too_long(action_id, 255, f"{at}/action_id")
        if element.get("type") == "button":
            problems += too_long(text_of(element.get("text")), 75, f"{at}/text/text")
            problems += too_long(str(element.get("value") or ""), 2000, f"{at}/value")
            problems += too_long(str(element.get("url") or ""), 3000, f"{at}/url")
    return problems
