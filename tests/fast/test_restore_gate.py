"""Restoring a saved workspace's variables runs code (unpickling), so it passes the place's
code policy as a run does, in every way a restore can happen: /restore, a message with only
files, the next run of a new session, a direct run. Off: the files come back and the person
is told the variables were not; approve: nothing is loaded before a person who saw the
variables' names says so; a session restores at most once. On the console (a pipe), with the
real conversation service and session manager, and the fake kernel (whose restores are
recorded: a real kernel would run a pickle's `__reduce__` there)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.approval import APPROVE_RESTORE, OFF_NOTICE, OFF_RESTORE
from bot.conversations.policy import Policies, PolicySettings
from bot.database import Databases
from bot.platforms.console import APPROVAL_PROMPT, RESTORE_PROMPT, Console
from executor import Executor
from executor.fake_backend import FakeBackend
from tests.fast.restore_fixtures import end_sessions, fake_backend, workspaces
from tests.fast.test_console_turns import Chat

__all__ = ["fake_backend", "workspaces"]

FILES_BACK = "The files of your workspace from a moment ago are back (data.csv)"
NOT_LOADED = "its variables were not loaded: x"
ALREADY = "Your workspace was already restored into this session"
WENT_ON = "This session already ran code without the saved variables"


@pytest.fixture
def chat(
    fake_executor: Executor, make_agent: Callable[..., Agent], model: ScriptedModel, tmp_path: Path
) -> Iterator[Callable[..., Chat]]:
    opened: list[Policies] = []

    def make(use_model: bool = False, **policy: Any) -> Chat:
        agent = make_agent(fake_executor, model if use_model else None, tmp_path, timeout=5)
        policies = Policies(Databases.sqlite(tmp_path), PolicySettings(**policy))
        opened.append(policies)
        made = Chat(agent, tmp_path)
        made.console = Console(
            Conversations(agent, policies=policies), made.out, tmp_path / "exports"
        )
        return made

    yield make
    for policies in opened:
        with contextlib.suppress(Exception):
            policies.close()


async def _saved(chat: Chat, executor: Executor) -> None:
    """x = 41 and data.csv made under auto, then the session ends and is saved."""
    assert "ok" in (await chat.pipe("/run x = 41")).lower()
    await end_sessions(executor)


def _sandbox_files(backend: FakeBackend) -> set[str]:
    (sandbox,) = backend.live
    return set(sandbox.files)


# ── policy off ─────────────────────────────────────────────────────────────────────────────


async def test_off_restore_brings_back_the_files_only_and_says_so(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    await console.pipe("/policy off")
    out = await console.pipe("/restore")
    assert OFF_RESTORE in out
    assert f"{FILES_BACK}; {NOT_LOADED}." in out
    assert fake_backend.restores == []
    assert _sandbox_files(fake_backend) == {"data.csv"}


async def test_off_a_message_with_only_files_starts_the_session_without_the_variables(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend, tmp_path: Path
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    (tmp_path / "more.csv").write_bytes(b"c\n3\n")
    out = await console.pipe("/policy off", f"/attach {tmp_path / 'more.csv'}", "here it is")
    assert f"note: {OFF_RESTORE} Not loaded: x. The files are back." in out
    assert fake_backend.restores == []
    assert _sandbox_files(fake_backend) == {"data.csv", "more.csv"}


async def test_off_the_models_next_message_restores_nothing_and_runs_nothing(
    chat: Callable[..., Chat],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
) -> None:
    console = chat(use_model=True)
    await _saved(console, fake_executor)
    await console.pipe("/policy off")
    model.script(runs("print(x)"), says("I cannot run code here."))
    out = await console.pipe("what is x?", "```\nprint(x)\n```")
    assert f"note: {OFF_NOTICE}" in out
    assert fake_backend.restores == []
    assert fake_backend.runs == ["x = 41"]


async def test_variables_kept_back_under_off_come_back_once_code_may_run_again(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend, tmp_path: Path
) -> None:
    """The policy changes between the save and the restore, and again before a run: the
    variables a session under off never loaded are saved again as they were."""
    console = chat()
    await _saved(console, fake_executor)
    (tmp_path / "more.csv").write_bytes(b"c\n3\n")
    await console.pipe("/policy off", f"/attach {tmp_path / 'more.csv'}", "here")
    await end_sessions(fake_executor)  # saved again, with x still not loaded
    await console.pipe("/policy auto")
    out = await console.pipe("/run print(x)")
    assert "41" in out.splitlines()
    assert fake_backend.restores == [["x"]]


# ── policy approve ─────────────────────────────────────────────────────────────────────────


async def test_approve_the_models_code_card_names_the_variables_and_no_loads_nothing(
    chat: Callable[..., Chat],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
) -> None:
    console = chat(use_model=True)
    await _saved(console, fake_executor)
    await console.pipe("/policy approve")
    model.script(runs("print(x)"), says("Not run."))
    out = await console.pipe("what is x?", "n")
    asked_at = out.index(APPROVAL_PROMPT)
    assert "after loading saved variables (which runs code)" in out[:asked_at]
    assert "\nx\nThe code:\nprint(x)\n" in out[:asked_at]
    assert "🚫 Cancelled by you; it was not run." in out
    assert fake_backend.restores == []
    assert fake_backend.runs == ["x = 41"]

    model.script(runs("print(x)"), says("It is 41."))
    out = await console.pipe("and now?", "y")
    assert "41" in out.splitlines()
    assert fake_backend.restores == [["x"]]


async def test_approve_a_direct_run_asks_for_the_variables_on_a_card_of_their_own(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    await console.pipe("/policy approve")
    out = await console.pipe("/run print(x)", "n")
    asked_at = out.index(RESTORE_PROMPT)
    assert "saved variables are to be loaded, which runs code" in out[:asked_at]
    assert "🚫 Cancelled by you; the saved variables were not loaded." in out
    assert "NameError" in out  # the run itself was the person's own: it ran, without x
    assert f"{FILES_BACK}; {NOT_LOADED}." in out
    assert fake_backend.restores == []
    # Loading them now would replace what the session made since.
    assert WENT_ON in await console.pipe("/restore")
    assert fake_backend.restores == []


async def test_approve_a_direct_run_loads_the_variables_once_approved(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    await console.pipe("/policy approve")
    out = await console.pipe("/run print(x)", "y")
    assert "✅ Approved by you; the saved variables are loaded." in out
    assert "41" in out.splitlines()
    assert fake_backend.restores == [["x"]]


async def test_approve_restore_asks_and_loads_only_on_yes(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    await console.pipe("/policy approve")
    out = await console.pipe("/restore", "n")
    assert RESTORE_PROMPT in out
    assert "🚫 Cancelled by you; the saved variables were not loaded." in out
    assert f"{APPROVE_RESTORE} {FILES_BACK}; {NOT_LOADED}." in out
    assert fake_backend.restores == []
    out = await console.pipe("/restore", "y")
    assert "Restored your workspace from a moment ago: x, data.csv." in out
    assert fake_backend.restores == [["x"]]


async def test_approve_a_message_with_only_files_loads_nothing_and_says_why(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend, tmp_path: Path
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    (tmp_path / "more.csv").write_bytes(b"c\n3\n")
    out = await console.pipe("/policy approve", f"/attach {tmp_path / 'more.csv'}", "here")
    assert f"note: {APPROVE_RESTORE} Not loaded: x. The files are back." in out
    assert RESTORE_PROMPT not in out
    assert fake_backend.restores == []


# ── at most once per session ───────────────────────────────────────────────────────────────


async def test_restore_twice_loads_once(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    assert "Restored your workspace" in await console.pipe("/restore")
    assert ALREADY in await console.pipe("/restore")
    assert fake_backend.restores == [["x"]]


async def test_an_automatic_restore_then_restore_loads_once_and_keeps_newer_variables(
    chat: Callable[..., Chat], fake_executor: Executor, fake_backend: FakeBackend
) -> None:
    console = chat()
    await _saved(console, fake_executor)
    out = await console.pipe("/run print(x)")
    assert "Restored your workspace from a moment ago: x, data.csv." in out
    assert ALREADY in await console.pipe("/restore")
    assert fake_backend.restores == [["x"]]
