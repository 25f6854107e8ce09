"""SlackServer: the aiohttp app that puts the Web API, Socket Mode and HTTP hooks together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Literal

import aiohttp
from aiohttp import web

from .ai import AiApps
from .files import Files
from .people import People


class SlackServer(AiApps, People, Files):
    """Slack's side of one workspace with the bot installed, for one connection mode."""

    def __init__(self, *, mode: Literal["socket", "http"], bot_url: str | None = None) -> None:
        super().__init__(mode=mode, bot_url=bot_url)
        self._ai_init()
        self._methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._apps_connections_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "views.open": self._views_open,
            "files.getUploadURLExternal": self._files_get_upload_url_external,
            "files.completeUploadExternal": self._files_complete_upload_external,
            "conversations.replies": self._conversations_replies,
            "conversations.members": self._conversations_members,
            "users.info": self._users_info,
            **self.ai_methods(),
        }

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket_mode)
        app.router.add_route("*", "/upload/v1/{key}", self._upload)
        app.router.add_get("/files-pri/{ref}/download/{name}", self._download)
        app.router.add_get("/files-pri/{ref}/{name}", self._download)
        app.router.add_get("/signin", self._signin)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_post("/commands/{team}/{n}/{key}", self._response_url)
        app.router.add_post("/actions/{team}/{n}/{key}", self._response_url)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=aiohttp.WSCloseCode.GOING_AWAY), 1.0)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
