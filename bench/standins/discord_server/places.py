"""Where an interaction comes from, and who authorized it: the app's server install, and a
person's own install of the app ("user install") in places the bot is not in.

Discord's rules, as its interaction docs give them: a command is offered in a place only if
its `integration_types` include an install that reaches the place and its `contexts` the
place's kind (0 a server, 1 the DM with the bot, 2 a DM or group DM between people). The
interaction's `authorizing_integration_owners` has "0" (the server's id, "0" in the DM with
the bot) where the app's server install applies, and "1" (the person's id) where their own
install does. Where the bot is not, there is no `guild` the bot knows (only the partial one
in the payload), `app_permissions` are those of a (group) DM, the channel's messages never
reach the gateway and the REST API refuses the channel, and an interaction that only a user
install authorized may send five follow-ups.
"""

from __future__ import annotations

from .messages import Messages
from .payloads import member_json, permissions_of, user_json
from .world import (
    APP_PERMISSIONS_ELSEWHERE,
    BOT_DM_CONTEXT,
    EVERYONE_PERMISSIONS,
    GUILD_CONTEXT,
    GUILD_ID,
    GUILD_INSTALL,
    JSON,
    PRIVATE_CHANNEL_CONTEXT,
    USER_INSTALL,
    Message,
)


class Places(Messages):
    """Installs, the places interactions come from, and what their payloads say of them."""

    def install_app(self, user: int) -> None:
        """`user` adds the app to their account (a user install)."""
        self.user_installs.add(user)

    def _context(self, channel: JSON) -> int:
        if "guild_id" in channel:
            return GUILD_CONTEXT
        return BOT_DM_CONTEXT if self._bot_is_in(channel) else PRIVATE_CHANNEL_CONTEXT

    def _owners_for(self, command: JSON, channel: JSON, user: int) -> dict[str, str] | None:
        """Who authorizes `command` for `user` in `channel`; None where Discord would not
        offer it there."""
        context = self._context(channel)
        contexts = command.get("contexts")
        if contexts is not None and context not in contexts:
            return None
        if context == BOT_DM_CONTEXT and command.get("dm_permission") is False:
            return None
        installs = command.get("integration_types") or [GUILD_INSTALL]
        owners: dict[str, str] = {}
        if GUILD_INSTALL in installs and self._bot_is_in(channel):
            owners[str(GUILD_INSTALL)] = channel.get("guild_id", "0")
        if USER_INSTALL in installs and user in self.user_installs and "guild_id" not in command:
            owners[str(USER_INSTALL)] = str(user)
        return owners or None

    def _owners_of(self, channel: JSON, source: Message | None) -> dict[str, str]:
        """The owners of a click or modal: those of the interaction that made the message
        (or opened the modal); a plain message of the bot's is the server install's."""
        if source is not None and source.interaction_id is not None:
            state = self._states.get(source.interaction_id)
            if state is not None:
                return dict(state.owners)
        return {str(GUILD_INSTALL): channel.get("guild_id", "0")}

    def _place_fields(self, channel: JSON, user: int, owners: dict[str, str]) -> JSON:
        """The payload's fields about where it comes from and who acts."""
        context = self._context(channel)
        fields: JSON = {"authorizing_integration_owners": owners, "context": context}
        if context != GUILD_CONTEXT:
            fields["user"] = user_json(user)
            if context == PRIVATE_CHANNEL_CONTEXT:
                fields["app_permissions"] = str(APP_PERMISSIONS_ELSEWHERE)
            return fields
        guild = int(channel["guild_id"])
        fields.update(
            guild_id=str(guild),
            guild={"id": str(guild), "locale": "en-US", "features": []},
            guild_locale="en-US",
        )
        if guild == GUILD_ID:
            fields["member"] = member_json(user, permissions=True)
        else:
            fields["member"] = member_json(user, permissions=True, roles=())
            fields["app_permissions"] = str(APP_PERMISSIONS_ELSEWHERE)
        return fields

    def _interaction_channel(self, channel: JSON, user: int) -> JSON:
        if "guild_id" not in channel:
            return dict(channel)
        permissions = permissions_of(user) if self._bot_is_in(channel) else EVERYONE_PERMISSIONS
        return {**channel, "permissions": str(permissions)}
