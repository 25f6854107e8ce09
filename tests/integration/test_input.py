"""The code's input() and getpass() with the real kernel under runc and runsc: each ask
reaches the caller and its answer the code, the time limit waits meanwhile, no answer is
EOFError, and a getpass() answer is masked in every later output (streams, values, errors,
the exported notebook) and left out of the saved workspace."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag
from executor.workspace import WorkspaceSettings, unpack
from storage.local import LocalStorage
from tests.integration.conftest import TEST_INSTANCE
from tests.support.prompts import answering

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

KEY = b"k" * 32
HIDDEN = "pa55-w0rd-xyzzy"
ASKS = """
name = input('Name: ')
age = input('Age: ')
print('hi', name, int(age) + 1)
"""
HIDES = """
from getpass import getpass
pw = getpass('Password: ')
kept = {'login': 'ada', 'pw': pw}
other = 'plain'
print('typed:', pw)
pw
"""


def executor(
    runtime: str, store: StoredWorkspaces | None = None, timeout_s: float = 20
) -> Executor:
    return Executor(
        default_tag(),
        limits=SandboxLimits(runtime=runtime, timeout_s=timeout_s),  # type: ignore[arg-type]
        instance=TEST_INSTANCE,
        pool=PoolSettings(size=0, template=False, pause_after_s=0),
        workspaces=store,
        workspace_settings=WorkspaceSettings(max_mb=20, max_variables_mb=2),
    )


async def test_each_input_is_asked_and_answered_and_the_time_limit_waits(runtime: str) -> None:
    asked, on_input = answering("Ada", "36", after_s=1.5)  # each longer than half the limit
    async with executor(runtime, timeout_s=2.5) as ex:
        session = ex.session("asks")
        ran = await session.run(ASKS, on_input=on_input)
        assert (ran.status, ran.stdout) == (Status.OK, "hi Ada 37\n"), ran.message
        assert [(a.prompt, a.password) for a in asked] == [("Name: ", False), ("Age: ", False)]
        assert [(i.answered, i.answer) for i in ran.inputs] == [(True, "Ada"), (True, "36")]

        _, silent = answering(None)
        unanswered = await session.run("x = input('Anything? ')", on_input=silent)
        assert unanswered.status is Status.ERROR
        assert unanswered.error is not None
        assert unanswered.error.name == "EOFError"
        assert "Nobody answered the code's input() ('Anything?')" in unanswered.message

        plain = await session.run("input('no one to ask: ')")
        assert plain.error is not None
        assert plain.error.name == "StdinNotImplementedError"
        assert (await session.run("print(name)")).stdout == "Ada\n"  # the session lives on


async def test_a_getpass_answer_is_masked_after_and_never_saved(
    runtime: str, tmp_path: Path
) -> None:
    store = StoredWorkspaces(LocalStorage(tmp_path / "files", KEY), KEY, timedelta(days=1))
    _, on_input = answering(HIDDEN)
    async with executor(runtime, store) as ex:
        session = ex.session("hides")
        ran = await session.run(HIDES, on_input=on_input)
        assert ran.status is Status.OK, ran.message
        assert ran.stdout == "typed: ••••\n"
        assert ran.results[-1].text == "'••••'"
        failed = await session.run("raise ValueError('it was ' + pw)")
        assert failed.error is not None
        assert "••••" in failed.error.value
        later = await session.run("print(kept, pw[::-1][::-1], len(pw))")
        assert later.stdout == f"{{'login': 'ada', 'pw': '••••'}} •••• {len(HIDDEN)}\n"
        notebook = json.dumps(await session.export_notebook(), ensure_ascii=False)
        assert "typed: ••••" in notebook
        assert HIDDEN not in notebook
        for result in (ran, failed, later):
            assert HIDDEN not in json.dumps(result.to_json())
    # Ending the executor saved the session's workspace: without the variables that hold it.
    packed = await store.load("hides")
    assert packed is not None
    saved = unpack(packed, 100, 100_000_000)
    assert "other" in saved.saved
    for name in ("pw", "kept"):
        assert name not in saved.saved
        assert "getpass" in saved.skipped[name]
    assert HIDDEN.encode() not in saved.variables
