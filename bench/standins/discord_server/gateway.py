"""The gateway WebSocket: HELLO, IDENTIFY, RESUME, heartbeats and dispatches."""

from __future__ import annotations

import json
import secrets
import sys

from aiohttp import WSMsgType, web

from .connection import Connection, Link, Session
from .payloads import dumps, me_json, member_json, role_json
from .state import ServerState
from .world import (
    APP_ID,
    CHANNEL_GENERAL,
    DAVE,
    GUILD_ID,
    GUILD_JOINED_AT,
    GUILD_TEXT,
    JSON,
    MEMBER_ROLES,
    OTHER_GUILD,
    OTHER_ROLE,
    OWNER,
    ROLE_MEMBER,
    TOKEN,
)


class Gateway(ServerState):
    """The bot's gateway connection and session, and the events sent on it."""

    async def wait_ready(self, timeout: float = 30.0, shards: int = 1) -> None:  # noqa: ASYNC109
        """Until the bot (each of its `shards`) identified, got READY and GUILD_CREATE, and
        is connected."""

        def ready() -> bool:
            links = [self._links.get(shard) for shard in range(shards)]
            return all(link and link.ready_sent and link.conn is not None for link in links)

        await self.wait_for(ready, timeout)

    async def drop_gateway(self, code: int = 4000, shard: int = 0) -> None:
        """Close a shard's gateway connection; later dispatches wait for its RESUME.
        4007 and 4009 also end the session, so the RESUME is refused."""
        link = self._links[shard]
        async with self._dispatch_lock:
            conn, link.conn = link.conn, None
        if code in (4007, 4009) and link.session is not None:
            link.session.invalid = True
        if conn is not None:
            await conn.ws.close(code=code, message=b"dropped by the test")
        self._touch()

    def shard_of(self, guild: int | None) -> int:
        """The shard Discord sends a guild's events on; DMs go to shard 0."""
        return 0 if guild is None else (guild >> 22) % self.shard_count

    def _guild_create(self) -> JSON:
        members = [member_json(user_id) for user_id in MEMBER_ROLES]
        channels = [
            {key: value for key, value in channel.items() if key != "guild_id"}
            for channel in self._channels.values()
            if channel["type"] == GUILD_TEXT and channel["guild_id"] == str(GUILD_ID)
        ]
        active_threads = [
            thread for thread in self.threads.values() if not thread["thread_metadata"]["archived"]
        ]
        return {
            "id": str(GUILD_ID),
            "name": "Cellmate Test Server",
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(OWNER),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 1,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "system_channel_id": str(CHANNEL_GENERAL),
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "application_id": None,
            "vanity_url_code": None,
            "max_members": 500000,
            "max_presences": None,
            "max_video_channel_users": 25,
            "max_stage_video_channel_users": 50,
            "incidents_data": None,
            "features": [],
            "roles": [role_json(GUILD_ID), role_json(ROLE_MEMBER)],
            "emojis": [],
            "stickers": [],
            # the GUILD_CREATE extras
            "joined_at": GUILD_JOINED_AT,
            "large": False,
            "unavailable": False,
            "lazy": True,
            "member_count": len(members),
            "members": members,
            "channels": channels,
            "threads": active_threads,
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def _guild_ids(self) -> list[int]:
        return [GUILD_ID, OTHER_GUILD] if self.other_guild else [GUILD_ID]

    def _other_guild_create(self) -> JSON:
        """OTHER_GUILD: no channels, and a role named like ROLE_MEMBER."""
        members = self.guild_members[OTHER_GUILD]
        return {
            **self._guild_create(),
            "id": str(OTHER_GUILD),
            "name": "Another Server",
            "owner_id": str(DAVE),
            "system_channel_id": None,
            "roles": [role_json(OTHER_GUILD), role_json(OTHER_ROLE)],
            "member_count": len(members),
            "members": [member_json(user, roles=roles) for user, roles in members.items()],
            "channels": [],
            "threads": [],
        }

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(timeout=2.0, compress=False, max_msg_size=16 * 1024 * 1024)
        await ws.prepare(request)
        if request.query.get("v", "10") != "10":
            await ws.close(code=4012, message=b"Invalid API version")
            return ws
        if request.query.get("encoding", "json") != "json":
            await ws.close(code=4002, message=b"Error while decoding payload.")
            return ws
        conn = Connection(ws, request.query.get("compress"))
        self._sockets.add(ws)
        try:
            await conn.send(
                {
                    "op": 10,
                    "s": None,
                    "t": None,
                    "d": {
                        "heartbeat_interval": self.heartbeat_interval_ms,
                        "_trace": ['["gateway-prd-test",{"micros":0}]'],
                    },
                }
            )
            async for frame in ws:
                if frame.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    await self._on_gateway_frame(conn, frame.data)
        finally:
            self._sockets.discard(ws)
            for link in self._links.values():
                if link.conn is conn:
                    link.conn = None
            self._touch()
        return ws

    async def _on_gateway_frame(self, conn: Connection, raw: str | bytes) -> None:
        try:
            payload = json.loads(raw)
            op, data = payload["op"], payload.get("d")
        except (ValueError, KeyError, TypeError):
            await conn.ws.close(code=4002, message=b"Error while decoding payload.")
            return
        if op == 1:
            await conn.send({"op": 11, "s": None, "t": None, "d": None})
        elif op == 2:
            await self._identify(conn, data or {})
        elif op == 6:
            await self._resume(conn, data or {})
        elif conn.session is None:
            await conn.ws.close(code=4003, message=b"Not authenticated.")
        elif op not in (3, 4):  # presence and voice state updates change nothing here
            await conn.ws.close(code=4001, message=b"Unknown opcode.")
        self._touch()

    async def _authenticates(self, conn: Connection, data: JSON) -> bool:
        """Whether an IDENTIFY or RESUME may go on; if not, the connection is closed as
        Discord closes it."""
        if conn.session is not None:
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return False
        if data.get("token") != TOKEN:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return False
        return True

    async def _identify(self, conn: Connection, data: JSON) -> None:
        if not await self._authenticates(conn, data):
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or intents < 0:
            await conn.ws.close(code=4013, message=b"Invalid intent(s).")
            return
        shard, count = data.get("shard") or [0, 1]
        if not (isinstance(shard, int) and isinstance(count, int) and 0 <= shard < count):
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return
        if count != self.shard_count and any(
            link.conn is not None for number, link in self._links.items() if number != shard
        ):
            # Every connection of a bot must agree on the number of shards.
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return
        self.shard_count = count
        self.identify_count += 1
        self.intents = intents
        session = Session(id=secrets.token_hex(16))
        guilds = [guild for guild in self._guild_ids() if self.shard_of(guild) == shard]
        ready: JSON = {
            "v": 10,
            "user": me_json(),
            "user_settings": {},
            "guilds": [{"id": str(guild), "unavailable": True} for guild in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(APP_ID), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": ["local"],
            "_trace": ['["gateway-prd-test",{"micros":0}]'],
        }
        if "shard" in data:
            ready["shard"] = data["shard"]
        async with self._dispatch_lock:
            link = self._links.setdefault(shard, Link())
            if link.session is not None:
                link.session.invalid = True
            link.session = session
            conn.session = session
            link.conn = conn
            link.ready_sent = False
            await self._emit(session, "READY", ready)
            if GUILD_ID in guilds:
                await self._emit(session, "GUILD_CREATE", self._guild_create())
            if OTHER_GUILD in guilds:
                await self._emit(session, "GUILD_CREATE", self._other_guild_create())
            link.ready_sent = True

    async def _resume(self, conn: Connection, data: JSON) -> None:
        if not await self._authenticates(conn, data):
            return
        link = next(
            (
                link
                for link in self._links.values()
                if link.session is not None and link.session.id == data.get("session_id")
            ),
            None,
        )
        session = None if link is None else link.session
        if link is None or session is None or session.invalid:
            await conn.send({"op": 9, "s": None, "t": None, "d": False})
            return
        seen = data.get("seq") or 0
        if seen > session.seq:
            await conn.ws.close(code=4007, message=b"Invalid seq.")
            return
        self.resume_count += 1
        async with self._dispatch_lock:
            # replay what the bot missed, in order, before anything new
            for seq, text in session.log:
                if seq > seen:
                    await conn.send(text)
            conn.session = session
            link.conn = conn
            await self._emit(session, "RESUMED", {"_trace": ['["gateway-prd-test",{"micros":0}]']})

    async def _dispatch(self, event: str, data: JSON, *, intent: int | None = None) -> None:
        """Send an event to the bot on its guild's shard, or keep it for the RESUME when
        that shard is disconnected."""
        session = self._links.get(self.shard_of(_guild_of(event, data)), Link()).session
        if session is None:
            print(f"discord_server: {event} before the bot identified, dropped", file=sys.stderr)
            self._touch()
            return
        if intent is not None and not (self.intents or 0) & intent:
            self._touch()
            return
        async with self._dispatch_lock:
            await self._emit(session, event, data)
        self._touch()

    async def _emit(self, session: Session, event: str, data: JSON) -> None:
        """Number, record and (if connected) send one dispatch; the dispatch lock is held."""
        session.seq += 1
        text = dumps({"op": 0, "s": session.seq, "t": event, "d": data})
        session.log.append((session.seq, text))
        for link in self._links.values():
            conn = link.conn
            if link.session is session and conn is not None and conn.session is session:
                await conn.send(text)


def _guild_of(event: str, data: JSON) -> int | None:
    """The guild an event is about (its shard's), or None for a DM's."""
    found = data.get("id") if event.startswith("GUILD_") and "guild_id" not in data else None
    found = data.get("guild_id", found)
    return int(found) if found else None
