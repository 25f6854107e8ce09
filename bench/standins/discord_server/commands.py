"""The application commands route: the bulk overwrite the bot syncs its commands with."""

from __future__ import annotations

import re

from aiohttp import web

from .payloads import DiscordError, form_error, json_response
from .rest import Rest, read_body
from .world import APP_ID, GUILD_ID, JSON


class Commands(Rest):
    """Global and guild application commands, as the bot syncs them."""

    def _command_key(self, request: web.Request) -> int | None:
        if request.match_info["application_id"] != str(APP_ID):
            raise DiscordError(403, 50001, "Missing Access")
        if "guild_id" in request.match_info:
            self._check_guild(request)
            return GUILD_ID
        return None

    @staticmethod
    def _check_guild(request: web.Request) -> None:
        if request.match_info["guild_id"] != str(GUILD_ID):
            raise DiscordError(403, 50001, "Missing Access")

    def _normalize_command(self, body: JSON, key: int | None, existing: JSON | None) -> JSON:
        kind = body.get("type", 1)
        name = body.get("name")
        pattern = r"[-_'\w]{1,32}" if kind == 1 else r".{1,32}"
        if (
            not isinstance(name, str)
            or not re.fullmatch(pattern, name)
            or (kind == 1 and name != name.lower())
        ):
            raise form_error(
                ["name"], "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid"
            )
        description = body.get("description") or ""
        if kind == 1 and not 1 <= len(description) <= 100:
            raise form_error(
                ["description"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        command: JSON = {
            "id": existing["id"] if existing else str(self._ids.next()),
            "application_id": str(APP_ID),
            "version": str(self._ids.next()),
            "default_member_permissions": body.get("default_member_permissions"),
            "type": kind,
            "name": name,
            "name_localizations": body.get("name_localizations"),
            "description": description if kind == 1 else "",
            "description_localizations": body.get("description_localizations"),
            "contexts": body.get("contexts"),
            "integration_types": body.get("integration_types") or [0],
            "nsfw": bool(body.get("nsfw", False)),
        }
        if body.get("options"):
            command["options"] = body["options"]
        if key is None:
            command["dm_permission"] = body.get("dm_permission", True)
        else:
            command["guild_id"] = str(key)
        return command

    def _existing_command(self, key: int | None, body: JSON) -> JSON | None:
        return next(
            (
                c
                for c in self.commands.get(key, [])
                if c["name"] == body.get("name") and c["type"] == body.get("type", 1)
            ),
            None,
        )

    async def _put_commands(self, request: web.Request) -> web.Response:
        key = self._command_key(request)
        body, _ = await read_body(request)
        if not isinstance(body, list):
            raise form_error([], "LIST_TYPE_CONVERT", "Must be an array.")
        # bulk overwrite keeps the id of a command that keeps its name and type
        self.commands[key] = [
            self._normalize_command(item, key, self._existing_command(key, item)) for item in body
        ]
        return json_response(self.commands[key])
