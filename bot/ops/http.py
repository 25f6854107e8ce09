"""The bot's one HTTP server (aiohttp): signed artifact links at /files/, stable links at
/a/ (a redirect to a fresh signed link on each click), /healthz, /metrics, and Slack's
/slack/events in HTTP mode.

The files route never lists a folder, and a request reaches the file system only through
`LocalStorage.open_signed`, which checks the key's characters and the link's signature and
expiry first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from storage.content_types import disposition, served_type
from storage.errors import StorageError
from storage.local import LocalStorage
from storage.stable_links import StableLinks

Checks = Callable[[], Awaitable[dict[str, str]]]
Exposition = Callable[[], bytes]
STORAGE_KEY = web.AppKey("storage", LocalStorage)
CHECKS_KEY: web.AppKey[Checks] = web.AppKey("checks")
METRICS_KEY: web.AppKey[Exposition] = web.AppKey("metrics")
LINKS_KEY = web.AppKey("links", StableLinks)
METRICS_TYPE = "text/plain; version=0.0.4"


def create_app(
    storage: LocalStorage | None,
    checks: Checks | None = None,
    metrics: Exposition | None = None,
    links: StableLinks | None = None,
) -> web.Application:
    app = web.Application()
    if links is not None:
        app[LINKS_KEY] = links
        app.router.add_get("/a/{id}", _stable)
    app.router.add_get("/healthz", _healthz)
    if checks is not None:
        app[CHECKS_KEY] = checks
    if metrics is not None:
        app[METRICS_KEY] = metrics
        app.router.add_get("/metrics", _metrics)
    if storage is not None:
        app[STORAGE_KEY] = storage
        app.router.add_get("/files/{key:.+}", _file)
    return app


async def _healthz(request: web.Request) -> web.Response:
    """200 when every check passes, else 503 naming the failing ones."""
    checks = request.app.get(CHECKS_KEY)
    results = await checks() if checks is not None else {}
    failing = {name: problem for name, problem in results.items() if problem != "ok"}
    body = {"status": "unhealthy" if failing else "ok", "checks": results}
    return web.json_response(body, status=503 if failing else 200)


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS_KEY]()
    return web.Response(body=body, headers={"Content-Type": METRICS_TYPE})


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


GONE_PAGE = (
    "<!doctype html><meta charset=utf-8><title>Not available</title>"
    "<p>This file is no longer available: it was removed after the retention period, "
    "or the link is not one of this bot's."
)


async def _stable(request: web.Request) -> web.Response:
    links = request.app[LINKS_KEY]
    try:
        target = await links.resolve(request.match_info["id"])
    except StorageError:
        return web.Response(
            status=503,
            text="The file store does not answer right now; try the link again in a minute.",
        )
    if target is None:
        return web.Response(
            status=404,
            text=GONE_PAGE,
            content_type="text/html",
            headers={"Content-Security-Policy": "default-src 'none'"},
        )
    raise web.HTTPFound(
        target, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
    )


async def start_server(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
