"""Files: upload v2 (upload URL, then complete) and url_private downloads."""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote

from aiohttp import web

from .events import Events
from .payloads import json_arg, message_blocks, opt_str
from .world import BOT_TOKEN, BOT_USER_ID, TEAM_DOMAIN, TEAM_ID, File, SlackError


class Files(Events):
    """The files the app uploads and downloads."""

    def _files_get_upload_url_external(self, args: dict[str, Any]) -> dict[str, Any]:
        filename, length = args.get("filename"), args.get("length")
        if not filename or length is None or not str(length).isdigit():
            raise SlackError("invalid_arguments")
        file_id = self._new_id("F")
        key = secrets.token_urlsafe(18)
        self._uploads[file_id] = {"filename": str(filename), "length": int(length), "data": None}
        self._upload_keys[key] = file_id
        return {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{key}", "file_id": file_id}

    def _files_complete_upload_external(self, args: dict[str, Any]) -> dict[str, Any]:
        entries = json_arg(args.get("files"), "files")
        if not isinstance(entries, list) or not entries:
            raise SlackError("invalid_arguments")
        channels = [str(args["channel_id"])] if args.get("channel_id") else []
        channels += [c for c in str(args.get("channels") or "").split(",") if c]
        channels = [self._resolve_channel(c) for c in channels]
        if args.get("thread_ts") and len(channels) > 1:
            raise SlackError("invalid_arguments")
        comment = opt_str(args.get("initial_comment"))
        uploaded = [self._finish_upload(entry, channels, args, comment) for entry in entries]
        for channel in channels:
            self._share_files(channel, uploaded, args, comment)
        return {"ok": True, "files": [self._file_object(f) for f in uploaded]}

    def _finish_upload(
        self, entry: Any, channels: list[str], args: dict[str, Any], comment: str | None
    ) -> File:
        file_id = entry.get("id") if isinstance(entry, dict) else None
        pending = self._uploads.pop(str(file_id), None)
        if pending is None or pending["data"] is None:
            raise SlackError("file_not_found", file_id=file_id)
        channel = channels[0] if channels else None
        thread_ts = self._thread_root(channel, opt_str(args.get("thread_ts"))) if channel else None
        f = File(
            id=str(file_id),
            name=pending["filename"],
            content=pending["data"],
            channel=channel,
            thread_ts=thread_ts,
            title=entry.get("title") or pending["filename"],
            initial_comment=comment,
        )
        self.files.append(f)
        self._all_files[f.id] = f
        return f

    def _share_files(
        self, channel: str, files: list[File], args: dict[str, Any], comment: str | None
    ) -> None:
        # Without initial_comment Slack shows the blocks given (if any) above the files.
        blocks = message_blocks(args.get("blocks")) if comment is None else []
        message = self._add_message(
            channel,
            user=BOT_USER_ID,
            text=comment or "",
            blocks=blocks,
            thread_ts=self._thread_root(channel, opt_str(args.get("thread_ts"))),
            files=files,
        )
        self._echo(self._message_event(message))

    # ----------------------------------------------------------------- files and hooks

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        file_id = self._upload_keys.pop(request.match_info["key"], None)
        if file_id is None or file_id not in self._uploads or request.method not in ("POST", "PUT"):
            return web.Response(status=404, text="upload URL not found")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            parts = [v.file.read() for v in form.values() if isinstance(v, web.FileField)]
            data = parts[0] if parts else b""
        else:
            data = await request.read()
        self._uploads[file_id]["data"] = data
        self._notify()
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["ref"].removeprefix(f"{TEAM_ID}-")
        f = self._all_files.get(file_id)
        if f is None:
            return web.Response(status=404, text="file not found")
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            # Slack answers a file request without the bot token with its sign-in page, so a
            # careless client saves HTML where it expected the file.
            raise web.HTTPFound(f"/signin?redir={quote(request.path)}")
        headers = {}
        if "/download/" in request.path:
            headers["Content-Disposition"] = f'attachment; filename="{f.name}"'
        return web.Response(body=f.content, content_type=f.mimetype, headers=headers)

    async def _redirect(self, request: web.Request) -> web.StreamResponse:
        # Not a Slack endpoint: lets a test put a redirect on Slack's own file host.
        raise web.HTTPFound(request.query["to"])

    async def _signin(self, request: web.Request) -> web.StreamResponse:
        html = (
            "<!DOCTYPE html><html><head><title>Slack</title></head>"
            f"<body><h1>Sign in to {TEAM_DOMAIN}</h1><form method='post'></form></body></html>"
        )
        return web.Response(text=html, content_type="text/html")
