"""The Web API: token checks, and the auth, chat, reactions, views, users and replies methods."""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .events import Events
from .payloads import (
    bearer_token,
    check_token,
    decode_json_arguments,
    flag,
    json_arg,
    message_blocks,
    opt_str,
    read_args,
    view_problems,
    with_ids,
)
from .world import (
    APP_ID,
    BOT_ID,
    BOT_USER_ID,
    MAX_MESSAGE_TEXT,
    MEMBERS,
    TEAM_DOMAIN,
    TEAM_ID,
    TRIGGER_TTL_S,
    Message,
    RateLimited,
    SlackError,
    member_of,
)


class WebApi(Events):
    """Web API methods the app calls, answered as Slack answers them."""

    _methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]  # set by SlackServer

    # ----------------------------------------------------------------- Web API plumbing

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await read_args(request)
        token = bearer_token(request) or args.pop("token", None)
        args.pop("token", None)
        args = decode_json_arguments(args)
        self.calls.append((method, args))
        for hook in self.call_hooks:
            hook(method, args)
        self._notify()
        handler = self._methods.get(method)
        if handler is None:
            print(f"slack_server: unimplemented Web API method {method} {args}", file=sys.stderr)
            return web.json_response({"ok": False, "error": "unknown_method", "req_method": method})
        try:
            check_token(method, token)
            result = handler(args)
        except RateLimited as error:
            self._notify()
            headers = {"Retry-After": str(error.retry_after)}
            return web.json_response(
                {"ok": False, "error": error.error}, status=429, headers=headers
            )
        except SlackError as error:
            result = {"ok": False, "error": error.error, **error.extra}
        self._notify()
        return web.json_response(result)

    # ----------------------------------------------------------------- Web API methods

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": "Cellmate Test",
            "user": member_of(BOT_USER_ID).name,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        ticket = secrets.token_urlsafe(16)
        self._tickets.add(ticket)
        url = f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={APP_ID}"
        return {"ok": True, "url": url}

    def _chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        text = str(args.get("text") or "")
        blocks = message_blocks(args.get("blocks"))
        if not text and not blocks and not args.get("attachments"):
            raise SlackError("no_text")
        if len(text) > MAX_MESSAGE_TEXT:
            raise SlackError("msg_too_long")
        extra = {k: args[k] for k in ("attachments", "metadata") if args.get(k)}
        message = self._add_message(
            channel,
            user=BOT_USER_ID,
            text=text,
            blocks=blocks,
            thread_ts=self._thread_root(channel, opt_str(args.get("thread_ts"))),
            extra=extra,
            unfurl_links=flag(args.get("unfurl_links")),
            unfurl_media=flag(args.get("unfurl_media")),
        )
        self._echo(self._message_event(message))
        return {"ok": True, "channel": channel, "ts": message.ts, "message": message.raw}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        message = self._find(channel, args.get("ts"))
        if message.user != BOT_USER_ID:
            raise SlackError("cant_update_message")
        previous = dict(message.raw)
        text = str(args["text"]) if args.get("text") is not None else message.text
        if len(text) > MAX_MESSAGE_TEXT:
            raise SlackError("msg_too_long")
        # Slack keeps a message's blocks when chat.update leaves the argument out.
        blocks = (
            message_blocks(args["blocks"]) if args.get("blocks") is not None else message.blocks
        )
        if not text and not blocks:
            raise SlackError("no_text")
        message.edits.append(message.text)
        message.text, message.blocks = text, blocks
        message.extra["edited"] = {"user": BOT_USER_ID, "ts": self._next_ts()}
        self._refresh(message)
        self._echo(self._change_event("message_changed", message, previous, message=message.raw))
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "text": message.text,
            "message": message.raw,
        }

    def _chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        if not args.get("user"):
            raise SlackError("user_not_found")
        blocks = message_blocks(args.get("blocks"))
        if not args.get("text") and not blocks and not args.get("attachments"):
            raise SlackError("no_text")
        message_ts = self._next_ts()
        self.ephemeral.append({**args, "channel": channel, "message_ts": message_ts})
        return {"ok": True, "message_ts": message_ts}

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        message, name = self._reaction_target(args)
        if name in message.reactions:
            raise SlackError("already_reacted")
        message.reactions.append(name)
        self._refresh(message)
        return {"ok": True}

    def _reactions_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        message, name = self._reaction_target(args)
        if name not in message.reactions:
            raise SlackError("no_reaction")
        message.reactions.remove(name)
        self._refresh(message)
        return {"ok": True}

    def _reaction_target(self, args: dict[str, Any]) -> tuple[Message, str]:
        name = str(args.get("name") or "")
        # Slack wants the bare name: "eyes", not ":eyes:".
        if not name or ":" in name or " " in name:
            raise SlackError("invalid_name")
        channel = self._resolve_channel(args.get("channel"))
        return self._find(channel, args.get("timestamp")), name

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger_id = self._use_trigger(args.get("trigger_id"))
        view = self._make_view(json_arg(args.get("view"), "view"))
        self.views.append({"trigger_id": trigger_id, "view": view})
        return {"ok": True, "view": view}

    def _use_trigger(self, trigger_id: Any) -> str:
        issued = self._triggers.get(str(trigger_id))
        if issued is None:
            raise SlackError("invalid_trigger_id")
        if time.monotonic() - issued > TRIGGER_TTL_S:
            raise SlackError("expired_trigger_id")
        return str(trigger_id)

    def _make_view(
        self, view: dict[str, Any], previous: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The view object Slack stores and returns for a view the app sent."""
        problems = view_problems(view)
        if problems:
            raise SlackError("invalid_arguments", response_metadata={"messages": problems})
        view_id = previous["id"] if previous else self._new_id("V")
        return {
            **view,
            "id": view_id,
            "team_id": TEAM_ID,
            "blocks": with_ids(view.get("blocks", [])),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "external_id": view.get("external_id", ""),
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "root_view_id": previous["root_view_id"] if previous else view_id,
            "previous_view_id": None,
            "app_id": APP_ID,
            "app_installed_team_id": TEAM_ID,
            "bot_id": BOT_ID,
        }

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(args.get("channel"))
        parent = self.messages.get((channel, str(args.get("ts"))))
        if parent is None or parent.deleted:
            raise SlackError("thread_not_found")
        thread = [parent] if parent.thread_ts else [parent, *self._replies(parent)]
        return self._page([m.raw for m in thread], args, default_limit=1000)

    def _page(
        self, items: list[dict[str, Any]], args: dict[str, Any], *, default_limit: int
    ) -> dict[str, Any]:
        start = int(args["cursor"]) if str(args.get("cursor") or "").isdigit() else 0
        limit = int(args.get("limit") or default_limit)
        page = items[start : start + limit]
        has_more = start + limit < len(items)
        return {
            "ok": True,
            "messages": page,
            "has_more": has_more,
            "response_metadata": {"next_cursor": str(start + limit) if has_more else ""},
        }

    def _conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        members = self.members.get(self._resolve_channel(args.get("channel")), [])
        start = int(args["cursor"]) if str(args.get("cursor") or "").isdigit() else 0
        limit = int(args.get("limit") or 100)
        more = start + limit < len(members)
        return {
            "ok": True,
            "members": members[start : start + limit],
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user"))
        if user not in MEMBERS:
            raise SlackError("user_not_found")
        member = MEMBERS[user]
        profile: dict[str, Any] = {
            "real_name": member.real_name,
            "display_name": member.name,
            "team": TEAM_ID,
        }
        if member.bot_id:
            profile["bot_id"] = member.bot_id
            profile["api_app_id"] = member.app_id
        return {
            "ok": True,
            "user": {
                "id": user,
                "team_id": TEAM_ID,
                "name": member.name,
                "real_name": member.real_name,
                "deleted": False,
                "is_bot": member.bot_id is not None,
                "is_app_user": False,
                "is_admin": member.admin,
                "is_owner": False,
                "tz": "Europe/Berlin",
                "profile": profile,
            },
        }
