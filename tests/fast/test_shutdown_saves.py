"""On shutdown every session's workspace is saved at once, each within its own deadline: one
session whose variables pickle slowly loses only its own workspace (and says so next time),
and the others are saved, all within the grace period (the real session manager and sealed
store; the fake kernel's snapshot is made slow for one conversation)."""

from __future__ import annotations

import logging
import time

import pytest

from bot.sandbox_words import spoken
from executor.fake_backend import FakeBackend
from tests.fast.test_workspaces import Outage, backend, executor, saved_in, storage

__all__ = ["backend", "storage"]


async def test_a_slow_save_loses_only_its_own_workspace_within_the_grace(
    backend: FakeBackend, storage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    backend.snapshot_s["conv-slow"] = 60.0  # pickling that would outlast any grace
    started = 0.0
    async with executor(backend, storage, shutdown_save_s=0.5) as first:
        await first.session("conv-slow").run("x = 41")
        for key in ("conv-a", "conv-b", "conv-c"):
            await first.session(key).run("y = 'b'")
        started = time.monotonic()
    took = time.monotonic() - started
    # At once: four sessions, one of them stuck, take one deadline, not four.
    assert took < 0.5 + 1.0, took
    assert not backend.live
    assert "could not save the workspace of session conv-slow" in caplog.text
    assert "conv-a" not in caplog.text.split("could not save")[-1]
    backend.snapshot_s.clear()
    async with executor(backend, storage) as second:
        for key in ("conv-a", "conv-b", "conv-c"):
            back = spoken(await second.session(key).run("print(y)"))
            assert back.stdout == "b\n", (key, back.message)
        slow = spoken(await second.session("conv-slow").run("print(x)"))
        assert slow.stdout == ""
        assert "Your workspace could not be saved when the last session ended" not in slow.message
        assert "Restored" not in slow.message


@pytest.fixture(autouse=True)
def _warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="executor.session")


async def test_a_kept_session_is_saved_too_and_its_workspace_is_the_fallback(
    backend: FakeBackend, storage: Outage
) -> None:
    """With a backend that keeps sessions (a session secret), a shutdown leaves each
    session's sandbox running for the next process, and saves its workspace as well: should
    that process not attach to it again, the workspace comes back instead."""
    backend.keeps_sessions = True
    async with executor(backend, storage) as first:
        await first.session("conv-a").run("x = 41")
        await first.session("conv-b").run("y = 'b'")
    assert len(backend.detached) == 2  # left running
    assert saved_in(storage, "conv-a")
    assert saved_in(storage, "conv-b")
    lost = next(s for s in backend.detached if s.session == "conv-b")
    backend.detached.discard(lost)  # the next process cannot reach this one
    await lost.destroy()
    async with executor(backend, storage) as second:
        kept = spoken(await second.session("conv-a").run("print(x)"))
        assert kept.stdout == "41\n"
        assert kept.message.startswith("The bot restarted since the last run"), kept.message
        back = spoken(await second.session("conv-b").run("print(y)"))
        assert back.stdout == "b\n"
        assert "Restored your workspace" in back.message
        backend.keeps_sessions = False  # this one ends its sessions
    assert not backend.live
