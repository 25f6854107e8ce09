"""Logging: plain text or one JSON object per line, each record carrying the conversation,
turn and run it belongs to, and never a secret from the settings."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable
from contextvars import ContextVar

from bot.terminal import clean

conversation_id: ContextVar[str] = ContextVar("conversation_id", default="")
turn_id: ContextVar[str] = ContextVar("turn_id", default="")
run_id: ContextVar[str] = ContextVar("run_id", default="")

REDACTED = "[redacted]"
CONTEXT_FIELDS = ("conversation", "turn", "run")


class ContextFilter(logging.Filter):
    """Adds the ids of the current conversation, turn and run to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.conversation = conversation_id.get()
        record.turn = turn_id.get()
        record.run = run_id.get()
        return True


class RedactFilter(logging.Filter):
    """Replaces every configured secret in a record's final text (and traceback)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Short values would redact ordinary words; real tokens and keys are long.
        self.secrets = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        for secret in self.secrets:
            message = message.replace(secret, REDACTED)
            if record.exc_text:
                record.exc_text = record.exc_text.replace(secret, REDACTED)
        record.msg, record.args = message, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, "")
            if value:
                entry[name] = value
        if record.exc_text or record.exc_info:
            entry["error"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(
            f"{name}={getattr(record, name)}"
            for name in CONTEXT_FIELDS
            if getattr(record, name, "")
        )
        line = f"{record.levelname} {record.name}: {record.getMessage()}"
        if ids:
            line += f" [{ids}]"
        if record.exc_text:
            line += "\n" + record.exc_text
        elif record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        # Log lines go to a terminal and may quote what sandboxed code chose (file names,
        # error text): they pass the same sanitiser as everything else shown there.
        return clean(line)


AZURE_HTTP_LOGGER = "azure.core.pipeline.policies.http_logging_policy"
PAYLOAD_LOGGERS = ("discord", "slack_bolt", "slack_sdk")
"""Chat libraries whose DEBUG lines carry whole payloads: what people type into the bot's
boxes (answers to the code's getpass() among them). They log at INFO at most."""


def quiet_payloads() -> None:
    for name in PAYLOAD_LOGGERS:
        payload_logger(name)


def payload_logger(name: str) -> logging.Logger:
    """The logger `name` of a chat library, at INFO at most (see PAYLOAD_LOGGERS). Slack's
    app takes one: its own loggers copy the root's level otherwise."""
    logger = logging.getLogger(name)
    if logger.getEffectiveLevel() < logging.INFO:
        logger.setLevel(logging.INFO)
    return logger


def setup_logging(form: str = "text", level: str = "WARNING", secrets: Iterable[str] = ()) -> None:
    """Configure the root logger once for the process (stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The Azure SDK logs every HTTP request and response at INFO: one upload would bury the
    # bot's own lines. Those come through at DEBUG only.
    chatty = logging.getLogger(AZURE_HTTP_LOGGER)
    chatty.setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING)
    quiet_payloads()
