"""The bot's one HTTP server (aiohttp): signed artifact links at /files/, and /healthz.

Slack's HTTP mode and /metrics join it later. The files route never lists a folder, and a
request reaches the file system only through `LocalStorage.open_signed`, which checks the
key's characters and the link's signature and expiry first.
"""

from __future__ import annotations

from aiohttp import web

from storage.content_types import disposition, served_type
from storage.local import LocalStorage

STORAGE_KEY = web.AppKey("storage", LocalStorage)


def create_app(storage: LocalStorage | None) -> web.Application:
    app = web.Application()
    app.router.add_get("/healthz", _healthz)
    if storage is not None:
        app[STORAGE_KEY] = storage
        app.router.add_get("/files/{key:.+}", _file)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _file(request: web.Request) -> web.StreamResponse:
    storage = request.app[STORAGE_KEY]
    found = storage.open_signed(
        request.match_info["key"], request.query.get("expires", ""), request.query.get("sig", "")
    )
    if found is None:
        raise web.HTTPNotFound(text="This link is not valid, or it has expired.")
    name = found.path.name
    return web.FileResponse(
        found.path,
        headers={
            "Content-Type": served_type(found.content_type),
            "Content-Disposition": disposition(found.content_type, name),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "Cache-Control": "private, max-age=300",
            "Referrer-Policy": "no-referrer",
        },
    )


async def start_server(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
