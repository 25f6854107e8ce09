"""The log set-up: the bot's own lines at the operator's level, the Azure SDK's per-request
lines only when debugging."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bot.logs import AZURE_HTTP_LOGGER, setup_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger(AZURE_HTTP_LOGGER).setLevel(logging.NOTSET)


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_azure_request_lines_stay_out_unless_debugging(
    level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(level=level)
    logging.getLogger(AZURE_HTTP_LOGGER).info("Request URL: 'http://127.0.0.1:10000/...'")
    logging.getLogger("bot.turns").warning("the model did not answer")
    err = capsys.readouterr().err
    assert "Request URL" not in err
    assert "the model did not answer" in err


def test_azure_request_lines_show_when_debugging(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(level="DEBUG")
    logging.getLogger(AZURE_HTTP_LOGGER).info("Request URL: 'http://127.0.0.1:10000/...'")
    assert "Request URL" in capsys.readouterr().err
