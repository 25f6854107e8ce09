"""Quotas, logs, health and metrics: the logic an operator relies on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest

from bench.standins.ports import free_port
from bot.conversations.quotas import DAY, HOUR, Quotas, QuotaSettings
from bot.database import Databases
from bot.errors import QuotaExceeded
from bot.logs import ContextFilter, JsonFormatter, RedactFilter, conversation_id, run_id
from bot.metrics import Metrics
from bot.ops.http import create_app, start_server
from storage.artifacts import Artifact

NOW = 1_800_000_000.0


def quotas(tmp_path: Path, **limits: float) -> Quotas:
    return Quotas(Databases.sqlite(tmp_path), QuotaSettings(**limits))  # type: ignore[arg-type]


def test_runs_per_hour_say_when_to_try_again(tmp_path: Path) -> None:
    q = quotas(tmp_path, user_runs_per_hour=2)
    q.record("alice", "guild", 1.0, now=NOW - 50 * 60)
    q.check("alice", "guild", now=NOW)
    q.record("alice", "guild", 1.0, now=NOW - 10 * 60)
    with pytest.raises(QuotaExceeded, match=r"limit of 2 runs per hour\. Try again in 10 min"):
        q.check("alice", "guild", now=NOW)
    q.check("bob", "guild", now=NOW)  # others are not affected
    q.check("alice", "guild", now=NOW + 11 * 60)  # the oldest run left the hour


def test_sandbox_seconds_per_day_and_per_server(tmp_path: Path) -> None:
    q = quotas(tmp_path, user_sandbox_s_per_day=100, server_runs_per_hour=2)
    q.record("alice", "g1", 60, now=NOW - DAY + HOUR)
    q.record("alice", "g1", 50, now=NOW - 60)
    with pytest.raises(QuotaExceeded, match=r"100 sandbox-seconds per day\. Try again in 60 min"):
        q.check("alice", "g1", now=NOW)
    q.record("bob", "g1", 1, now=NOW - 30)
    with pytest.raises(QuotaExceeded, match="this server's limit of 2 runs per hour"):
        q.check("carol", "g1", now=NOW)
    q.check("carol", "g2", now=NOW)
    top = q.top("g1", now=NOW)
    assert [(u.who, u.runs) for u in top] == [("alice", 2), ("bob", 1)]
    assert top[0].seconds == 110


def test_no_limits_never_refuse(tmp_path: Path) -> None:
    q = quotas(tmp_path)
    for _ in range(50):
        q.record("alice", "g", 1000, now=NOW)
    q.check("alice", "g", now=NOW)
    assert not q.settings.enabled


def test_json_logs_carry_ids_and_never_a_secret() -> None:
    record = logging.LogRecord(
        "bot.agent", logging.INFO, __file__, 1, "token is %s", ("xoxb-secret-123",), None
    )
    conversation_id.set("slack:T1:C1:123.4")
    run_id.set("abc123")
    try:
        raise RuntimeError("failed with xoxb-secret-123")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    assert ContextFilter().filter(record)
    assert RedactFilter(["xoxb-secret-123", "short"]).filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "token is [redacted]"
    assert line["conversation"] == "slack:T1:C1:123.4"
    assert line["run"] == "abc123"
    assert "xoxb-secret-123" not in json.dumps(line)
    assert "failed with [redacted]" in line["error"]


async def test_healthz_is_503_with_the_failing_checks_and_metrics_are_exposed() -> None:
    async def checks() -> dict[str, str]:
        return {"engine": "ok", "storage": "StorageUnavailable: Azurite is down", "discord": "ok"}

    metrics = Metrics()
    metrics.turn("discord:thread:1", "answer", 2.5)
    metrics.run("ok", 0.3)
    metrics.published([Artifact("chart-1.png", 2000, "image/png", "published")])
    metrics.usage(10, 5)
    port = free_port()
    runner = await start_server(create_app(None, checks, metrics.exposition), "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 503
                body = await response.json()
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert response.status == 200
                text = await response.text()
    finally:
        await runner.cleanup()
    assert body["status"] == "unhealthy"
    assert body["checks"]["storage"] == "StorageUnavailable: Azurite is down"
    assert 'cellmate_turns_total{outcome="answer",platform="discord"} 1.0' in text
    assert 'cellmate_runs_total{status="ok"} 1.0' in text
    assert "cellmate_artifact_bytes_total 2000.0" in text
    assert 'cellmate_llm_tokens_total{kind="completion"} 5.0' in text
    assert "cellmate_run_seconds_bucket" in text
