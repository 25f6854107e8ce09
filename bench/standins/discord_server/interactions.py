"""Interactions: commands, clicks and modals users start, and the bot's responses.

One concept past 400 lines: every kind of interaction has the same life (created with a
token, answered or deferred, followed up until its token expires), and the payloads sent
for each kind are built from the same resolved data."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from .checks import check_modal, check_text_input, walk, with_ids
from .payloads import form_error, member_json, role_json, user_json
from .places import Places
from .world import (
    ALICE,
    APP_ID,
    APPLICATION_COMMAND,
    BOT_ID,
    CHANNEL_GENERAL,
    EPHEMERAL,
    EVERYONE_PERMISSIONS,
    GUILD_ID,
    INTERACTION_FLAGS,
    JSON,
    LOADING,
    MAX_UPLOAD,
    MEMBER_ROLES,
    MESSAGE_COMPONENT,
    MODAL_SUBMIT,
    SELECT_TYPES,
    USERS,
    Interaction,
    InteractionState,
    Message,
    Upload,
)


class Interactions(Places):
    """What users start (slash, context_menu, click, submit_modal) and its callbacks."""

    async def slash(
        self,
        name: str,
        options: dict[str, object] | None = None,
        *,
        channel_id: int = CHANNEL_GENERAL,
        user: int = ALICE,
    ) -> Interaction:
        """A user runs a synced slash command; "group sub" names a subcommand. Option values
        are plain values; users, channels and roles by id; attachments as (filename, bytes)."""
        top, *path = name.split()
        command, owners = self._find_command(top, 1, channel_id, user)
        data: JSON = {"id": command["id"], "name": top, "type": 1}
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        container, definitions = data, command.get("options") or []
        for part in path:
            sub = next((o for o in definitions if o["name"] == part and o["type"] in (1, 2)), None)
            if sub is None:
                raise AssertionError(f"/{top} has no subcommand {part!r}")
            node: JSON = {"type": sub["type"], "name": part}
            container.setdefault("options", []).append(node)
            container, definitions = node, sub.get("options") or []
        resolved: JSON = {}
        values = self._command_options(name, definitions, options or {}, resolved, channel_id)
        if values:
            container["options"] = values
        if resolved:
            data["resolved"] = resolved
        return await self._interact(
            APPLICATION_COMMAND, data, channel_id, user, owners, name=name, command_type=1
        )

    async def context_menu(self, name: str, message: Message, *, user: int = ALICE) -> Interaction:
        """A user runs a message context-menu command (Apps → name) on `message`."""
        target = self._require_message(message)
        command, owners = self._find_command(name, 3, target.channel_id, user)
        data: JSON = {
            "id": command["id"],
            "name": name,
            "type": 3,
            "target_id": str(target.id),
            # message commands see the target's content even without the content intent
            "resolved": {"messages": {str(target.id): self._message_json(target)}},
        }
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        return await self._interact(
            APPLICATION_COMMAND, data, target.channel_id, user, owners, name=name, command_type=3
        )

    async def click(
        self,
        message: Message,
        custom_id: str,
        *,
        user: int = ALICE,
        values: Sequence[str] | None = None,
    ) -> Interaction:
        """A user clicks a button (or picks `values` in a select menu) on the message as it
        is now on the server."""
        current = self._require_message(message)
        component = next(
            (
                c
                for _, c in walk(current._meta.get("components", []))
                if c.get("custom_id") == custom_id
            ),
            None,
        )
        if component is None:
            present = [c.get("custom_id") for _, c in walk(current._meta.get("components", []))]
            raise AssertionError(f"message {current.id} has no component {custom_id!r}: {present}")
        if component.get("disabled"):
            raise AssertionError(f"component {custom_id!r} is disabled")
        data: JSON = {
            "custom_id": custom_id,
            "component_type": component["type"],
            "id": component["id"],
        }
        if component["type"] in SELECT_TYPES:
            data["values"] = list(values or [])
        channel = self._require_channel(current.channel_id)
        owners = self._owners_of(channel, current)
        return await self._interact(
            MESSAGE_COMPONENT, data, current.channel_id, user, owners, source=current
        )

    async def submit_modal(
        self,
        opened: dict[str, Any],
        values: dict[str, Any],
        *,
        channel_id: int,
        user: int = ALICE,
    ) -> Interaction:
        """A user fills in and submits the modal the bot opened (`opened` is the data of its
        type 9 callback); `values` by text input custom_id (a list for select menus)."""
        origin = self._modal_origin(opened)
        answered: set[str] = set()
        components = [
            self._modal_answer(component, values, answered)
            for component in with_ids(opened.get("components") or [])
        ]
        unknown = set(values) - answered
        if unknown:
            raise AssertionError(f"the modal has no inputs {sorted(unknown)}")
        data: JSON = {"custom_id": opened["custom_id"], "components": components}
        source = None
        if origin is not None and origin.source_message is not None:
            source = self.messages[origin.source_message]
        owners = (
            dict(origin.owners)
            if origin is not None
            else self._owners_of(self._require_channel(channel_id), None)
        )
        return await self._interact(MODAL_SUBMIT, data, channel_id, user, owners, source=source)

    def expire(self, interaction: Interaction) -> None:
        """The interaction's token stops working, as after Discord's 3 s / 15 min limits."""
        self._states[interaction.id].expired = True
        self._touch()

    def _find_command(
        self, name: str, kind: int, channel_id: int, user: int
    ) -> tuple[JSON, dict[str, str]]:
        """The command `user` can use in the channel, and who authorizes it there."""
        channel = self._require_channel(channel_id)
        keys = [GUILD_ID, None] if channel.get("guild_id") == str(GUILD_ID) else [None]
        for key in keys:
            for command in self.commands.get(key, []):
                if command["name"] != name or command.get("type", 1) != kind:
                    continue
                owners = self._owners_for(command, channel, user)
                if owners is not None:
                    return command, owners
        synced = {key: [c["name"] for c in value] for key, value in self.commands.items()}
        raise AssertionError(
            f"no command {name!r} (type {kind}) usable in channel {channel_id}; synced: {synced}"
        )

    def _command_options(
        self,
        command: str,
        definitions: list[JSON],
        values: dict[str, object],
        resolved: JSON,
        channel_id: int,
    ) -> list[JSON]:
        known = {definition["name"]: definition for definition in definitions}
        for key in values:
            if key not in known:
                raise AssertionError(f"/{command} has no option {key!r}; it has {list(known)}")
        for definition in definitions:
            if definition.get("required") and definition["name"] not in values:
                raise AssertionError(f"/{command} needs option {definition['name']!r}")
        options = []
        for key, value in values.items():
            definition = known[key]
            choices = definition.get("choices")
            if choices and value not in [choice["value"] for choice in choices]:
                raise AssertionError(f"{value!r} is not a choice of /{command} {key}: {choices}")
            kind = definition["type"]
            options.append(
                {
                    "name": key,
                    "type": kind,
                    "value": self._option_value(kind, value, resolved, channel_id),
                }
            )
        return options

    def _option_value(self, kind: int, value: Any, resolved: JSON, channel_id: int) -> Any:
        in_guild = "guild_id" in self._channels[channel_id]
        simple: dict[int, Callable[[Any], Any]] = {3: str, 4: int, 5: bool, 10: float}
        if kind in simple:
            return simple[kind](value)
        if kind == 11:
            filename, content = value
            attachment = self._store_file(filename, content)
            resolved.setdefault("attachments", {})[str(attachment.id)] = self._attachment_json(
                attachment, channel_id, ephemeral=True
            )
            return str(attachment.id)
        ident = int(value)
        if kind == 6 or (kind == 9 and ident in USERS):
            resolved.setdefault("users", {})[str(ident)] = user_json(ident)
            if in_guild and ident in MEMBER_ROLES:
                member = member_json(ident, with_user=False, permissions=True)
                resolved.setdefault("members", {})[str(ident)] = member
        elif kind in (8, 9):
            resolved.setdefault("roles", {})[str(ident)] = role_json(ident)
        elif kind == 7:
            channel = self._require_channel(ident)
            resolved.setdefault("channels", {})[str(ident)] = {
                key: channel[key]
                for key in ("id", "type", "name", "parent_id", "thread_metadata")
                if key in channel
            } | {"permissions": str(EVERYONE_PERMISSIONS)}
        return str(ident)

    def _modal_origin(self, opened: JSON) -> InteractionState | None:
        for callback in reversed(self.callbacks):
            if callback["type"] == 9 and callback["data"] == opened:
                return self._states.get(callback["interaction_id"])
        return None

    def _modal_answer(self, component: JSON, values: dict[str, Any], answered: set[str]) -> JSON:
        """What the client sends back for one modal component, mirroring its layout."""
        kind = component["type"]
        answer: JSON = {"type": kind, "id": component["id"]}
        if kind == 1:
            answer["components"] = [
                self._modal_answer(child, values, answered)
                for child in component.get("components") or []
            ]
        elif kind == 18:
            answer["component"] = self._modal_answer(component["component"], values, answered)
        elif kind == 4:
            custom_id = component["custom_id"]
            value = str(values.get(custom_id, component.get("value") or ""))
            check_text_input(component, value)
            answered.add(custom_id)
            answer.update(custom_id=custom_id, value=value)
        elif kind in SELECT_TYPES:
            custom_id = component["custom_id"]
            chosen = values.get(custom_id, [])
            answered.add(custom_id)
            answer.update(
                custom_id=custom_id, values=[chosen] if isinstance(chosen, str) else list(chosen)
            )
        return answer

    async def _interact(
        self,
        kind: int,
        data: JSON,
        channel_id: int,
        user: int,
        owners: dict[str, str],
        *,
        name: str | None = None,
        command_type: int | None = None,
        source: Message | None = None,
    ) -> Interaction:
        """Create an interaction and dispatch INTERACTION_CREATE."""
        channel = self._require_channel(channel_id)
        interaction_id = self._ids.next()
        token = f"aW50ZXJhY3Rpb246{interaction_id}:{secrets.token_urlsafe(48)}"
        payload: JSON = {
            "id": str(interaction_id),
            "application_id": str(APP_ID),
            "type": kind,
            "data": data,
            "channel_id": str(channel_id),
            "channel": self._interaction_channel(channel, user),
            "token": token,
            "version": 1,
            "app_permissions": str(EVERYONE_PERMISSIONS),
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": MAX_UPLOAD,
        }
        payload.update(self._place_fields(channel, user, owners))
        if source is not None:
            payload["message"] = self._message_json(source)
        interaction = Interaction(interaction_id, token, channel_id, payload)
        state = InteractionState(
            interaction,
            kind,
            user,
            name=name,
            command_type=command_type,
            source_message=source.id if source else None,
            owners=owners,
        )
        self.interactions[interaction_id] = interaction
        self._states[interaction_id] = state
        self._by_token[token] = state
        await self._dispatch("INTERACTION_CREATE", payload)
        return interaction

    def _stamp(self, message: Message, state: InteractionState, *, followup: bool) -> None:
        """Mark a message as made by an interaction, as Discord's message objects do."""
        interaction = state.interaction
        message.interaction_id = interaction.id
        guild = "guild_id" in self._channels[message.channel_id]
        metadata: JSON = {
            "id": str(interaction.id),
            "type": state.kind,
            "user": user_json(state.user),
            "authorizing_integration_owners": dict(state.owners),
        }
        extra: JSON = {"interaction_metadata": metadata}
        if state.kind == APPLICATION_COMMAND:
            message.type = 23 if state.command_type == 3 else 20
            if state.command_type == 3:
                metadata["target_message_id"] = interaction.raw["data"]["target_id"]
            legacy: JSON = {
                "id": str(interaction.id),
                "type": state.kind,
                "name": state.name,
                "user": user_json(state.user),
            }
            if guild:
                legacy["member"] = member_json(state.user, with_user=False)
            extra["interaction"] = legacy
        elif state.source_message is not None:
            # answers to a component (or a modal opened from one) reply to its message
            message.type = 19
            message.reference_id = state.source_message
            metadata["interacted_message_id"] = str(state.source_message)
        else:
            message.type = 20
        if followup and state.original_id is not None:
            metadata["original_response_message_id"] = str(state.original_id)
        message._meta["interaction"] = extra

    def _callback_json(self, state: InteractionState, kind: int, message: Message | None) -> JSON:
        interaction: JSON = {"id": str(state.interaction.id), "type": state.kind}
        resource: JSON = {"type": kind}
        if message is not None:
            interaction["response_message_id"] = str(message.id)
            interaction["response_message_loading"] = bool(message.flags & LOADING)
            interaction["response_message_ephemeral"] = bool(message.flags & EPHEMERAL)
            if kind in (4, 7):
                resource["message"] = message.raw
        return {"interaction": interaction, "resource": resource}

    async def _respond(
        self, state: InteractionState, kind: int, data: JSON, uploads: list[Upload]
    ) -> Message | None:
        """Carry out an interaction callback; returns the message it made or changed."""
        channel_id = state.interaction.channel_id
        if kind in (4, 5):
            if kind == 4:
                message = self._compose(channel_id, data, uploads, allowed_flags=INTERACTION_FLAGS)
            else:
                # "<bot> is thinking...": a placeholder the first edit or follow-up fills in
                flags = LOADING | (int(data.get("flags") or 0) & EPHEMERAL)
                message = Message(
                    id=self._ids.next(),
                    channel_id=channel_id,
                    author_id=BOT_ID,
                    content="",
                    flags=flags,
                )
                state.loading = True
            self._stamp(message, state, followup=False)
            state.original_id = message.id
            state.created.append(message.id)
            await self._publish(message)
            return message
        if kind == 6 and state.source_message is None:
            return None  # a modal opened by a command: the ACK has no message to update
        if kind in (6, 7):
            if state.source_message is None:
                raise form_error(
                    ["type"],
                    "INTERACTION_RESPONSE_TYPE_INVALID",
                    "Invalid interaction response type",
                )
            state.original_id = state.source_message
            message = self.messages[state.source_message]
            if kind == 7:
                self._edit(message, data, uploads)
                await self._updated(message)
            return message
        if kind == 9:
            check_modal(data)
        return None
