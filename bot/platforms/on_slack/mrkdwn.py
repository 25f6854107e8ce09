"""Markdown to Slack's mrkdwn, and text made safe for Slack.

Slack gives `&`, `<` and `>` meaning (`<!channel>`, `<@U123>`, `<url|text>`), so all text
that is not ours is escaped first; links and emphasis are then written in Slack's syntax.
Code blocks keep their content, escaped, and cannot be broken out of.
"""

from __future__ import annotations

import html
import re

from bot.platforms.markup import code_block

FENCED = re.compile(r"(```[^\n`]*\n.*?```)", re.DOTALL)
INLINE_CODE = re.compile(r"(`[^`\n]+`)")
LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
ITALIC = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.MULTILINE)
BULLET = re.compile(r"^(\s*)[-*+]\s+", re.MULTILINE)


def escape(text: str) -> str:
    """Slack's three control characters escaped, so nothing in `text` pings or links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Text as the user typed it (Slack sends `&`, `<`, `>` escaped)."""
    return html.unescape(text)


def slack_code(text: str, language: str = "") -> str:
    """Sandbox output in a code block it cannot leave, escaped for Slack."""
    return escape(code_block(text, language))


def to_mrkdwn(markdown: str) -> str:
    """A model's Markdown answer in Slack's mrkdwn, with everything else escaped."""
    parts = FENCED.split(markdown)
    out = []
    for index, part in enumerate(parts):
        if index % 2 == 1:  # a fenced block: Slack shows no language, so drop it
            body = part[part.index("\n") + 1 : -3]
            out.append(slack_code(body))
        else:
            out.append(_prose(part))
    return "".join(out)


def _prose(text: str) -> str:
    pieces = INLINE_CODE.split(text)
    out = []
    for index, piece in enumerate(pieces):
        if index % 2 == 1:
            out.append(escape(piece))
            continue
        piece = escape(piece)
        piece = LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1).replace('|', '¦')}>", piece)
        piece = HEADING.sub(r"*\1*", piece)
        piece = BULLET.sub(r"\1• ", piece)
        piece = ITALIC.sub(r"_\1_", piece)
        piece = BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", piece)
        piece = STRIKE.sub(r"~\1~", piece)
        out.append(piece)
    return "".join(out)
