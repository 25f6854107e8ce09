"""The limits Discord enforces on what the bot sends: components, embeds, modals."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from .payloads import form_error, too_long
from .world import IS_COMPONENTS_V2, JSON


def children(component: JSON) -> Iterator[tuple[str | int, JSON]]:
    """A component's nested components with their key in the payload (rows, labels, ...)."""
    yield from enumerate(component.get("components") or [])
    for key in ("component", "accessory"):
        if isinstance(component.get(key), dict):
            yield key, component[key]


def walk(components: list[JSON], path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, JSON]]:
    """Every component in document order, with its path inside `components`."""
    for index, component in enumerate(components):
        here = (*path, index)
        yield here, component
        yield from walk_inside(component, here)


def walk_inside(parent: JSON, where: tuple[Any, ...]) -> Iterator[tuple[Any, JSON]]:
    for key, child in children(parent):
        here = (*where, "components", key) if isinstance(key, int) else (*where, key)
        yield here, child
        yield from walk_inside(child, here)


def with_ids(components: list[JSON]) -> list[JSON]:
    """A copy with every component numbered, as Discord numbers those sent without an id."""
    numbered = copy.deepcopy(components)
    used = {c["id"] for _, c in walk(numbered) if isinstance(c.get("id"), int)}
    counter = 0
    for _, component in walk(numbered):
        if "id" not in component:
            counter += 1
            while counter in used:
                counter += 1
            component["id"] = counter
    return numbered


def check_components(components: Any, flags: int) -> None:
    if not isinstance(components, list):
        raise form_error(["components"], "LIST_TYPE_CONVERT", "Must be an array.")
    v2 = bool(flags & IS_COMPONENTS_V2)
    if not v2 and len(components) > 5:
        raise too_long(["components"], 5)
    seen: set[str] = set()
    for path, component in walk(components):
        where = ["components", *path]
        kind = component.get("type")
        if not v2 and len(path) == 1 and kind != 1:
            raise form_error([*where, "type"], "UNION_TYPE_CHOICES", "Value must be one of {1}.")
        if kind == 1 and not 1 <= len(component.get("components") or []) <= 5:
            raise form_error(
                [*where, "components"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length."
            )
        if kind == 2:
            check_button(component, where)
        custom_id = component.get("custom_id")
        if custom_id is not None:
            if len(str(custom_id)) > 100:
                raise too_long([*where, "custom_id"], 100)
            if custom_id in seen:
                raise form_error(
                    [*where, "custom_id"],
                    "COMPONENT_CUSTOM_ID_DUPLICATED",
                    "Component custom id cannot be duplicated",
                )
            seen.add(custom_id)


def check_button(button: JSON, where: list[Any]) -> None:
    if len(button.get("label") or "") > 80:
        raise too_long([*where, "label"], 80)
    style = button.get("style")
    if style == 5 and not button.get("url"):
        raise form_error([*where, "url"], "BASE_TYPE_REQUIRED", "This field is required")
    if style in (1, 2, 3, 4) and not button.get("custom_id"):
        raise form_error([*where, "custom_id"], "BASE_TYPE_REQUIRED", "This field is required")


EMBED_LIMITS = (("title", 256), ("description", 4096))


def check_embeds(embeds: Any) -> None:
    if not isinstance(embeds, list):
        raise form_error(["embeds"], "LIST_TYPE_CONVERT", "Must be an array.")
    if len(embeds) > 10:
        raise too_long(["embeds"], 10)
    total = 0
    for index, embed in enumerate(embeds):
        for key, limit in EMBED_LIMITS:
            text = embed.get(key) or ""
            if len(text) > limit:
                raise too_long(["embeds", index, key], limit)
            total += len(text)
        fields = embed.get("fields") or []
        if len(fields) > 25:
            raise too_long(["embeds", index, "fields"], 25)
        for number, item in enumerate(fields):
            for key, limit in (("name", 256), ("value", 1024)):
                text = item.get(key) or ""
                if len(text) > limit:
                    raise too_long(["embeds", index, "fields", number, key], limit)
                total += len(text)
        for key, inner, limit in (("footer", "text", 2048), ("author", "name", 256)):
            text = (embed.get(key) or {}).get(inner) or ""
            if len(text) > limit:
                raise too_long(["embeds", index, key, inner], limit)
            total += len(text)
    if total > 6000:
        raise form_error(
            ["embeds"], "MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000"
        )


def check_message_fields(payload: JSON, flags: int) -> None:
    """The limits Discord enforces on a message's fields (create, edit, interaction data)."""
    content = payload.get("content")
    if content is not None:
        if not isinstance(content, str):
            raise form_error(["content"], "STRING_TYPE_CONVERT", "Must be a string.")
        if len(content) > 2000:
            raise too_long(["content"], 2000)
    if payload.get("embeds") is not None:
        check_embeds(payload["embeds"])
    if payload.get("components") is not None:
        check_components(payload["components"], flags)
    if flags & IS_COMPONENTS_V2:
        for key in ("content", "embeds"):
            if payload.get(key):
                raise form_error(
                    [key],
                    "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2",
                    f"The '{key}' field cannot be used when using MessageFlags.IS_COMPONENTS_V2",
                )
    if len(payload.get("attachments") or []) > 10:
        raise too_long(["attachments"], 10)


def check_text_input(component: JSON, value: str) -> None:
    """What Discord's client enforces before it lets a user submit a modal."""
    custom_id = component["custom_id"]
    if component.get("required", True) and not value:
        raise AssertionError(f"text input {custom_id!r} is required")
    if value and len(value) < component.get("min_length", 0):
        raise AssertionError(f"text input {custom_id!r} needs {component['min_length']}+ chars")
    if len(value) > component.get("max_length", 4000):
        raise AssertionError(f"text input {custom_id!r} takes at most {component['max_length']}")


def check_modal(data: JSON) -> None:
    if not 1 <= len(str(data.get("custom_id") or "")) <= 100:
        raise form_error(
            ["data", "custom_id"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
        )
    if not 1 <= len(str(data.get("title") or "")) <= 45:
        raise form_error(
            ["data", "title"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 45 in length."
        )
    components = data.get("components") or []
    if not 1 <= len(components) <= 5:
        raise form_error(
            ["data", "components"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length."
        )
    for index, component in enumerate(components):
        label = (component.get("label") if component.get("type") == 18 else None) or ""
        if len(label) > 45:
            raise too_long(["data", "components", index, "label"], 45)
